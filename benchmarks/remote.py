#!/usr/bin/env python
"""Remote shards: streaming throughput from a local S3 endpoint (moto's server
on 127.0.0.1) versus the same shards on local disk, and random-access
records/s through range requests.

    .venv/bin/python benchmarks/remote.py [--quick] [--out DIR]

The S3 numbers measure this package's remote path (fsspec/s3fs, read-ahead,
range requests, retries) against an in-process server on loopback: an upper
bound for a real bucket, where latency and bandwidth are the network's.
Prints a Markdown table and writes DIR/remote.md (DIR: bench-output).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time
import urllib.request

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def start_s3():
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import WSGIRequestHandler, make_server

    WSGIRequestHandler.log_request = lambda *a, **k: None  # quiet
    server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.port}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bench", method="PUT")).read()
    return server, {"key": "test", "secret": "test",
                    "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-output"))
    args = parser.parse_args()
    os.environ.setdefault("TFRECORD_TORCH_CACHE", os.path.join(args.out, "index-cache"))
    import tfrecord_torch as tt
    from tfrecord_torch.data.shards import expand_paths

    shards, per_shard, size = (2, 500, 10_000) if args.quick else (4, 2_500, 10_000)
    random_reads = 200 if args.quick else 2_000
    server, so = start_s3()
    local_dir = os.path.join(args.out, "remote-local")
    os.makedirs(local_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    payloads = [tt.make_example({"data": rng.bytes(size - 16)}) for _ in range(64)]
    for target, options in ((local_dir, None), ("s3://bench/shards", so)):
        with tt.ShardedWriter(target, name="bench", max_records=per_shard, storage_options=options) as w:
            for i in range(shards * per_shard):
                w.write(payloads[i % 64])
    total_bytes = sum(len(payloads[i % 64]) for i in range(shards * per_shard))
    rows = []
    for label, paths, options in (("local disk", os.path.join(local_dir, "bench-train.tfrecord-*"), None),
                                  ("S3 (moto, loopback)", "s3://bench/shards/bench-train.tfrecord-*", so)):
        files = expand_paths(paths, options)

        def stream():
            n = sum(len(p) for f in files for p in tt.read_records(f, storage_options=options))
            assert n == total_bytes, (n, total_bytes)

        seconds = best(stream, 1 if args.quick else 3)
        rows.append(("streaming (read_records, CRCs checked)", label, total_bytes / seconds / 1e6, "MB/s"))
        ds = tt.IndexedTFRecordDataset(files, storage_options=options, transform=len)
        picks = np.random.default_rng(1).integers(0, len(ds), random_reads)

        def random_access():
            for i in picks.tolist():
                ds[i]

        seconds = best(random_access, 1 if args.quick else 3)
        rows.append(("random access (IndexedTFRecordDataset, one range read each)", label,
                     random_reads / seconds, "records/s"))
    server.shutdown()
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
             f"Python {platform.python_version()}",
             f"Command: `.venv/bin/python benchmarks/remote.py{' --quick' if args.quick else ''}`; "
             f"{shards} shards x {per_shard} records x {size // 1000} KB",
             "", "| case | storage | throughput | unit | S3 / local |", "|---|---|---:|---|---:|"]
    local = {case: value for case, where, value, _ in rows if where == "local disk"}
    for case, where, value, unit in rows:
        lines.append(f"| {case} | {where} | {value:,.0f} | {unit} | {value / local[case]:.2f} |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "remote.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
