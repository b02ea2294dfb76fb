"""Remote shards: opening a dataset over many small shards on a local S3 server (moto, in a
process of its own, logging every request): the time to the first record and the requests
per shard the opening made, counted in the server's log."""

from __future__ import annotations

import atexit
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchmarks.harness.registry import SPEC, case, dataset, target, worker

FIRST_RECORD_TARGET_S = 5.0


@dataset("remote_shards", folder=True,
         full={"shards": 1000, "records": 10, "seed": 0},
         quick={"shards": 1000, "records": 10, "seed": 0},
         tiny={"shards": 20, "records": 4, "seed": 0},
         describe=lambda p: (f"{p['shards']:,} shards x {p['records']} small tf.train.Examples (int64 'id' "
                             "+ 8 floats), each shard with its index file, written by ShardedWriter"))
def build_remote(path: str, p: dict) -> dict:
    import numpy as np

    from tfrecord_torch import ShardedWriter, make_example

    n = p["shards"] * p["records"]
    xs = np.random.default_rng(p["seed"]).standard_normal((n, 8), dtype=np.float32)
    with ShardedWriter(path, name="bench", max_records=p["records"]) as w:
        for i in range(n):
            w.write(make_example({"id": i, "x": xs[i]}))
    for name in os.listdir(path):  # the shards and their indexes only: no metadata
        if name.endswith(".json") or name.startswith("."):
            os.remove(os.path.join(path, name))
    return {"records": n, "checksum": n * (n - 1) // 2}


case("remote_open", dataset="remote_shards", unit="s", repeats=1, quick_repeats=1, probe=False, measure=True,
     title="Open a TFRecordDataset over remote shards (a glob on a local S3 server: moto in its own "
           "process, about 5-10 ms a request) and read the first record; value = seconds from the "
           "constructor to the first record (lower is better); requests per shard counted in the "
           "server's log while the dataset opened",
     short="remote_open: seconds to the first record over S3 shards (lower is better)")


class MotoServer:
    """moto's S3 server in a process of its own, its request log in a file."""

    def __init__(self, log_path: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.endpoint = f"http://127.0.0.1:{port}"
        self.options = {"key": "test", "secret": "test",
                        "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}}
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"moto's server did not start (log: {log_path})") from None
                time.sleep(0.1)

    def requests(self) -> int:
        """Requests the server has logged so far."""
        time.sleep(0.2)  # lines of the last answers may still be on their way to the file
        with open(self.log_path) as f:
            return len(re.findall(r"(?:GET|HEAD|PUT|POST|DELETE) \S+ HTTP/", f.read()))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._log.close()


def _remote_open(path: str, *, index_files: bool, cached: bool):
    import s3fs

    from tfrecord_torch import TFRecordDataset

    server = MotoServer(os.path.join(SPEC["scratch"], f"moto-{os.getpid()}.log"))
    atexit.register(server.close)  # the worker's exit stops it (left running, it took CPU from later rows)
    so = server.options
    urllib.request.urlopen(urllib.request.Request(f"{server.endpoint}/bench", method="PUT")).read()
    fs = s3fs.S3FileSystem(**so)
    # the shards, and with index_files the index objects their writer left in index/ beside them
    names = sorted(n for n in os.listdir(path) if n != "index")
    if index_files:
        names += [f"index/{n}" for n in sorted(os.listdir(os.path.join(path, "index")))]
    fs.put([os.path.join(path, n) for n in names], [f"bench/shards/{n}" for n in names])
    shards = sum(1 for n in names if "/" not in n)
    expected = SPEC["expected"]
    pattern = "s3://bench/shards/bench-train.tfrecord-*"

    def new_cache() -> None:
        os.environ["TFRECORD_TORCH_CACHE"] = tempfile.mkdtemp(prefix="index-cache-", dir=SPEC["scratch"])

    new_cache()
    if cached:  # epoch 0 streams the shards and leaves their indexes in the cache
        sum(1 for _ in TFRecordDataset(pattern, storage_options=so))

    opening = [0]

    def count_opening() -> None:
        """Requests of one opening alone (untimed: counting waits for the server's log)."""
        s3fs.S3FileSystem.clear_instance_cache()
        if not cached:
            new_cache()
        before = server.requests()
        TFRecordDataset(pattern, storage_options=so)
        opening[0] = server.requests() - before

    def run():
        count_opening()
        s3fs.S3FileSystem.clear_instance_cache()  # a new process's state: no cached listing
        if not cached:
            new_cache()
        before = server.requests()
        t0 = time.perf_counter()
        ds = TFRecordDataset(pattern, storage_options=so)
        if cached:
            ds.set_epoch(1)  # epoch 1 reads by the indexes epoch 0 left in the cache
        opened = time.perf_counter() - t0
        first = next(iter(ds))
        seconds = time.perf_counter() - t0
        # counted after the clock stopped (the count waits for the log)
        total = server.requests() - before
        counted = ds.streamed or sum(ds.counts or ()) == expected["records"]  # epoch 0 streams unindexed shards
        if not counted or int(first["id"][0]) != 0:
            raise AssertionError(f"wrong result: counts {ds.counts}, first id {first['id']}")
        return {"value": seconds, "metrics": {"requests_per_shard": opening[0] / shards, "open_s": opened},
                "detail": f"{shards:,} shards: the constructor took {opened:.2f} s and {opening[0]:,} requests "
                          f"({opening[0] / shards:.2f} per shard), the first record {total - opening[0]} more"}
    return run


@worker("remote_open", "ours, index files",
        note="TFRecordDataset('s3://bench/shards/bench-train.tfrecord-*') with the index objects ShardedWriter left "
             "(index/<shard>.index): one listing, then the index objects on 16 threads; then next(iter(ds))")
def remote_open_indexed(path):
    return _remote_open(path, index_files=True, cached=False)


@worker("remote_open", "ours, no index files, indexes cached",
        note="the same shards without index objects, read once before (untimed: epoch 0 streams them and "
             "leaves each shard's index in the local cache, keyed by URL, size and ETag); then "
             "ds.set_epoch(1), which reads by those indexes")
def remote_open_cached(path):
    return _remote_open(path, index_files=False, cached=True)


@worker("remote_open", "ours, no index files, first open",
        note="the same shards without index objects, nothing cached: epoch 0 streams them (nothing per "
             "shard when the dataset is made; each shard indexed as it is read)")
def remote_open_scanned(path):
    return _remote_open(path, index_files=False, cached=False)


target("remote_open", "ours, index files: under 2 requests per shard", "ours, index files",
       metric="requests_per_shard", below=2.0)
target("remote_open", f"ours, index files: first record within {FIRST_RECORD_TARGET_S:g} s", "ours, index files",
       below=FIRST_RECORD_TARGET_S)
