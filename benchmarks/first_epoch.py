#!/usr/bin/env python
"""The first epoch over a bucket without index objects: the time from the
dataset's constructor to the first batch, and the shard bytes fetched before
it and in a whole epoch 0, over shards that only a server's generator holds.

    nice -n 10 .venv/bin/python benchmarks/first_epoch.py [--shards 1000] [--shard-mb 100] [--epoch-shards 20]

The bucket is a small S3 server in a process of its own (``--serve``): it
lists ``--shards`` objects of ``--shard-mb`` MB under ``s3://gen/train/``
(no index objects, as a TensorFlow team's bucket) and answers each GET by
generating the requested bytes (tf.train.Examples of a 16-byte ``key`` and a
``--record-kb`` KB ``image``, framed with their CRCs), so 100 GB of shards
take no disk; first byte ``--latency`` s after the request, ``--bandwidth``
bytes/s per connection. ``GET /__stats`` gives the GETs and body bytes sent.

Rows: ``TFRecordDataset(...)`` in order and shuffled (epoch 0's buffer:
``--buffer`` records, 10,000 by default, which yields from its 128th record
on and grows to its size; tf.data's waits to fill) in batch mode through a
DataLoader of 2 workers (batches of 64), index cache empty, shard cache off: the first batch (time,
shard bytes fetched by then); beside them, in the same run, the limit: one
ranged GET of the first batch's bytes of one shard. ``--epoch-shards N``
then reads a whole epoch 0 over the first N shards (bandwidth unshaped) and
reports the shard bytes fetched per byte of data, and epoch 1's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BUCKET = "gen"
PREFIX = "train/"


class Shards:
    """The generated shards: names, sizes, and any byte range of one."""

    def __init__(self, count: int, shard_bytes: int, record_bytes: int) -> None:
        from tfrecord_torch import make_example

        self.count = count
        key = b"K" * 16
        self.template = make_example({"key": key, "image": b"\x5a" * record_bytes})
        self.key_at = self.template.index(key)
        self.frame = len(self.template) + 16
        self.records = max(1, shard_bytes // self.frame)
        self.size = self.records * self.frame
        self.names = [f"{PREFIX}train-{i:05d}-of-{count:05d}" for i in range(count)]

    def record(self, shard: int, number: int) -> bytes:
        import struct

        from tfrecord_torch.records.crc import masked_crc32c

        key = f"{shard:08d}{number:08d}".encode()
        payload = self.template[:self.key_at] + key + self.template[self.key_at + 16:]
        length = struct.pack("<Q", len(payload))
        return (length + struct.pack("<I", masked_crc32c(length)) + payload
                + struct.pack("<I", masked_crc32c(payload)))

    def read(self, shard: int, start: int, end: int):
        """Bytes [start, end) of shard ``shard``, a record's frame at a time."""
        number = start // self.frame
        while start < end:
            frame = self.record(shard, number)
            at = start - number * self.frame
            piece = frame[at:at + end - start]
            yield piece
            start += len(piece)
            number += 1


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    shards: Shards
    latency = 0.0
    bandwidth = 0.0
    stats = {"gets": 0, "shard_gets": 0, "shard_bytes": 0}
    lock = threading.Lock()

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, headers: dict, body=b"") -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.end_headers()
        if self.command != "HEAD":
            self._paced([body] if isinstance(body, bytes) else body)

    def _paced(self, pieces) -> None:
        start, sent = time.perf_counter(), 0
        for piece in pieces:
            self.wfile.write(piece)
            sent += len(piece)
            if self.bandwidth:
                ahead = sent / self.bandwidth - (time.perf_counter() - start)
                if ahead > 0:
                    time.sleep(ahead)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/__stats":
            with self.lock:
                return self._send(200, {"Content-Length": len(json.dumps(self.stats))}, json.dumps(self.stats).encode())
        time.sleep(self.latency)
        if url.path.rstrip("/") == f"/{BUCKET}":
            return self._list(parse_qs(url.query))
        name = url.path[len(BUCKET) + 2:]
        if name not in self.shards.names:
            return self._send(404, {"Content-Length": 0})
        self._object(self.shards.names.index(name))

    def _object(self, shard: int) -> None:
        size = self.shards.size
        headers = {"ETag": f'"gen{shard}"', "Last-Modified": "Thu, 01 Jan 2026 00:00:00 GMT",
                   "Accept-Ranges": "bytes", "Content-Type": "binary/octet-stream"}
        start, end, status = 0, size, 200
        asked = self.headers.get("Range")
        if asked:
            first, _, last = asked.removeprefix("bytes=").partition("-")
            start, end, status = int(first), min(int(last) + 1 if last else size, size), 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        headers["Content-Length"] = max(0, end - start)
        if self.command == "GET":
            with self.lock:
                self.stats["gets"] += 1
                self.stats["shard_gets"] += 1
                self.stats["shard_bytes"] += max(0, end - start)
        self._send(status, headers, self.shards.read(shard, start, end))

    def _list(self, query: dict) -> None:
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        with self.lock:
            self.stats["gets"] += 1
        keys, folders = [], set()
        for name in self.shards.names:
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            if delimiter and delimiter in rest:
                folders.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
            else:
                keys.append(name)
        start = int(query.get("continuation-token", ["0"])[0])
        page, more = keys[start:start + 1000], start + 1000 < len(keys)
        body = "".join(f"<Contents><Key>{k}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                       f"<ETag>\"gen{self.shards.names.index(k)}\"</ETag><Size>{self.shards.size}</Size>"
                       "<StorageClass>STANDARD</StorageClass></Contents>" for k in page)
        body += "".join(f"<CommonPrefixes><Prefix>{f}</Prefix></CommonPrefixes>" for f in sorted(folders))
        token = f"<NextContinuationToken>{start + 1000}</NextContinuationToken>" if more else ""
        xml = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/'
               f'2006-03-01/"><Name>{BUCKET}</Name><Prefix>{prefix}</Prefix><KeyCount>{len(page)}</KeyCount>'
               f"<MaxKeys>1000</MaxKeys><IsTruncated>{'true' if more else 'false'}</IsTruncated>{token}{body}"
               "</ListBucketResult>").encode()
        self._send(200, {"Content-Type": "application/xml", "Content-Length": len(xml)}, xml)


def serve(args: argparse.Namespace) -> None:
    Handler.shards = Shards(args.shards, int(args.shard_mb * 1e6), int(args.record_kb * 1e3))
    Handler.latency, Handler.bandwidth = args.latency, args.bandwidth
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


class Bucket:
    """The generating server in its own process, stopped by :meth:`close`."""

    def __init__(self, args: argparse.Namespace, shards: int, bandwidth: float) -> None:
        command = [sys.executable, os.path.abspath(__file__), "--serve", "--shards", str(shards),
                   "--shard-mb", str(args.shard_mb), "--record-kb", str(args.record_kb),
                   "--latency", str(args.latency), "--bandwidth", str(bandwidth)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        self.endpoint = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"
        self.options = {"key": "test", "secret": "test", "skip_instance_cache": True,
                        "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}}
        self.layout = Shards(shards, int(args.shard_mb * 1e6), int(args.record_kb * 1e3))
        self.data = shards * self.layout.size

    def stats(self) -> dict:
        with urllib.request.urlopen(f"{self.endpoint}/__stats") as answer:
            return json.loads(answer.read())

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def dataset(bucket: Bucket, shuffle=True, **kw):
    from tfrecord_torch import Bytes, Source, TFRecordDataset

    return TFRecordDataset(f"s3://{BUCKET}/{PREFIX}train-*", features={"key": Bytes()}, shuffle=shuffle,
                           storage_options=bucket.options, source=Source(cache=None), **kw)


def first_batch(bucket: Bucket, batch: int, shuffle) -> dict:
    from torch.utils.data import DataLoader

    import tfrecord_torch.data.iterable  # noqa: F401 - imported before the clock starts, as in a training script

    before = bucket.stats()["shard_bytes"]
    start = time.perf_counter()
    ds = dataset(bucket, shuffle, batch_size=batch)
    first = next(iter(DataLoader(ds, batch_size=None, num_workers=2)))
    seconds = time.perf_counter() - start
    assert len(first["key"]) == batch
    return {"seconds": seconds, "bytes": bucket.stats()["shard_bytes"] - before}


def limit(bucket: Bucket, batch: int) -> float:
    """One ranged GET of a batch's bytes of one shard, through the same server."""
    import s3fs

    fs = s3fs.S3FileSystem(**bucket.options)
    fs.info(f"{BUCKET}/{bucket.layout.names[0]}")  # untimed: the client made and connected
    start = time.perf_counter()
    fs.cat_file(f"{BUCKET}/{bucket.layout.names[0]}", 0, min(batch, bucket.layout.records) * bucket.layout.frame)
    return time.perf_counter() - start


def epochs(bucket: Bucket) -> list[float]:
    """Shard bytes fetched per byte of data in epoch 0 and in epoch 1 (main process)."""
    ds = dataset(bucket, batch_size=64)
    ratios = []
    for _ in range(2):
        before = bucket.stats()["shard_bytes"]
        sum(len(b["key"]) for b in ds)
        ratios.append((bucket.stats()["shard_bytes"] - before) / bucket.data)
    return ratios


def first_rows(args: argparse.Namespace) -> list:
    from tfrecord_torch import Shuffling

    return [("in order", False), (f"shuffle=Shuffling(buffer={args.buffer})", Shuffling(buffer=args.buffer))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--shard-mb", type=float, default=100.0)
    parser.add_argument("--record-kb", type=float, default=110.0)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--bandwidth", type=float, default=100e6)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--buffer", type=int, default=10_000, help="epoch 0's shuffle buffer (records)")
    parser.add_argument("--epoch-shards", type=int, default=20, help="shards read whole for the bytes row (0: none)")
    args = parser.parse_args()
    if args.serve:
        return serve(args)
    with tempfile.TemporaryDirectory(prefix="first-epoch-index-") as cache:  # an empty index cache, removed after
        os.environ["TFRECORD_TORCH_CACHE"] = cache
        run(args)


def run(args: argparse.Namespace) -> None:
    bucket = Bucket(args, args.shards, args.bandwidth)
    try:
        peer = limit(bucket, args.batch)
        rows = {how: first_batch(bucket, args.batch, shuffle) for how, shuffle in first_rows(args)}
    finally:
        bucket.close()
    print(f"{args.shards:,} shards x {args.shard_mb:g} MB ({bucket.data / 1e9:.1f} GB), latency {args.latency:g} s, "
          f"{args.bandwidth / 1e6:g} MB/s per connection, no index objects, empty index cache; 2 DataLoader workers, "
          f"batches of {args.batch}; limit (one GET of a batch's bytes): {peer:.2f} s")
    for how, got in rows.items():
        print(f"  {how}: first batch {got['seconds']:.2f} s ({got['seconds'] / peer:.1f}x the limit), "
              f"{got['bytes'] / 1e6:.1f} MB of shards fetched ({got['bytes'] / bucket.data:.5f} of the data)")
    if args.epoch_shards:
        bucket = Bucket(args, args.epoch_shards, 0.0)
        try:
            zero, one = epochs(bucket)
        finally:
            bucket.close()
        print(f"  {args.epoch_shards} shards ({bucket.data / 1e9:.2f} GB) read whole: epoch 0 fetched {zero:.3f}x "
              f"the data, epoch 1 (by the indexes epoch 0 cached) {one:.3f}x")


if __name__ == "__main__":
    main()
