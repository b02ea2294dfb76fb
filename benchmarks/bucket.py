#!/usr/bin/env python
"""Training reads from a shaped bucket: each reading mode through the
DataLoader at several first-byte latencies, beside the same pipeline on local
disk and beside the limit (N concurrent range GETs through the same proxy).

    nice -n 10 .venv/bin/python benchmarks/bucket.py [--quick] [--out DIR]

The bucket is moto's S3 server (its own process) behind benchmarks/shaped.py
(its own process): first byte ``latency`` after the request, 100 MB/s per
connection, any number of connections. Records are ~100 KB JPEGs (512x512,
quality 90) with a label; the pipeline decodes them to uint8 [3, 512, 512]
with ``Image()`` in 2 DataLoader workers, batches of 64. Modes: in order,
``shuffle=True``, map-style with a RandomSampler, batch mode
(``shuffle=True, batch_size=64``). Each row: images/s over the first
``--records`` images, the time from ``iter(loader)`` to the first batch, and
shard GETs per image (counted by the proxy). Rounds interleave the storages.

Beside each bucket row of the modes they have (in order, shuffled), the
peers read the same payload bytes from the same bucket through the same
proxy, each in its own process under its venv (benchmarks/bucket_peers.py;
a peer whose venv is missing is skipped with a note): webdataset tar shards
and mosaicml streaming MDS shards, as many shards as ours, each row with its
ratio to our same mode in the same round.
Prints a Markdown table and writes DIR/bucket.md (DIR: bench-output).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MODES = ("in order", "shuffle=True", "map-style RandomSampler", "batch mode shuffle=True")
BATCH = 64
PEERS_SCRIPT = os.path.join(ROOT, "benchmarks", "bucket_peers.py")
# Each peer's venv (benchmarks/venvs/README.md) and where its shards live in the bucket.
PEERS = {"webdataset": ("webdataset", "wds"), "mosaicml-streaming": ("mosaicml-streaming", "mds"),
         "mosaicml-streaming + xxh64": ("mosaicml-streaming", "mds")}
PEER_MODES = ("in order", "shuffle=True")
PEER_CHECKS = {"webdataset": "none", "mosaicml-streaming": "none (hashes written, not checked)",
               "mosaicml-streaming + xxh64": "xxh64 of each shard"}


def peer_python(peer: str) -> str | None:
    """The peer's venv interpreter, or None when it is not installed."""
    venvs = os.environ.get("TFRECORD_BENCH_VENVS", os.path.join(ROOT, "benchmarks", "venvs"))
    path = os.path.join(venvs, PEERS[peer][0], "bin", "python")
    return path if os.access(path, os.X_OK) else None


def write_peer(peer: str, jpegs: str, shards: int, per_shard: int, out: str, direct: dict, mirror: str) -> None:
    """The peer's shards of the same payloads, uploaded to the bucket and copied into the proxy's mirror."""
    import s3fs

    prefix = PEERS[peer][1]
    local = os.path.join(out, f"bucket-{prefix}")
    shutil.rmtree(local, ignore_errors=True)
    subprocess.run([peer_python(peer), PEERS_SCRIPT, "write", "--peer", peer, "--jpegs", jpegs, "--shards",
                    str(shards), "--per-shard", str(per_shard), "--out", local], check=True)
    s3fs.S3FileSystem(**direct).put(local + "/", f"bench/{prefix}/", recursive=True)
    shutil.copytree(local, os.path.join(mirror, "bench", prefix), dirs_exist_ok=True)


def run_peer(peer: str, mode: str, port: int, shards: int, records: int) -> tuple[float, float]:
    """(images/s, seconds to the first batch) of the peer reading through the proxy at ``port``."""
    proc = subprocess.run([peer_python(peer), PEERS_SCRIPT, "read", "--peer", peer, "--mode", mode, "--endpoint",
                           f"http://127.0.0.1:{port}", "--bucket", "bench", "--prefix", PEERS[peer][1],
                           "--shards", str(shards), "--records", str(records)],
                          check=True, stdout=subprocess.PIPE, text=True, timeout=900)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return got["rate"], got["first"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(log: str) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("moto did not start") from None
            time.sleep(0.1)


def start_proxy(upstream: int, mirror: str | None = None) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "benchmarks", "shaped.py"),
                             "--upstream", f"127.0.0.1:{upstream}", "--latency", "0", "--bandwidth", "100e6",
                             *(["--mirror", mirror] if mirror else [])],
                            stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def control(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}") as r:
        return json.loads(r.read())


def options(port: int) -> dict:
    return {"key": "test", "secret": "test",
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"}}


def loader_of(mode: str, paths, so):
    import torch
    from torch.utils.data import DataLoader

    from tfrecord_torch import Image, IndexedTFRecordDataset, Int64, TFRecordDataset

    features = {"image": Image("image"), "label": Int64("label")}
    if mode == "in order":
        return DataLoader(TFRecordDataset(paths, features=features, storage_options=so), batch_size=BATCH,
                          num_workers=2)
    if mode == "shuffle=True":
        return DataLoader(TFRecordDataset(paths, features=features, shuffle=True, storage_options=so),
                          batch_size=BATCH, num_workers=2)
    if mode == "map-style RandomSampler":
        ds = IndexedTFRecordDataset(paths, features=features, storage_options=so)
        sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(0))
        return DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=2)
    ds = TFRecordDataset(paths, features=features, shuffle=True, batch_size=BATCH, storage_options=so)
    return DataLoader(ds, batch_size=None, num_workers=2)


def run_mode(mode: str, paths, so, records: int) -> tuple[float, float]:
    """(images/s over the first ``records`` images, seconds to the first batch)."""
    loader = loader_of(mode, paths, so)
    t0 = time.perf_counter()
    seen, first = 0, None
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        seen += len(batch["label"])
        if seen >= records:
            break
    return seen / (time.perf_counter() - t0), first or 0.0


def limit(so: dict, paths: list[str], size: int, concurrent: int, count: int) -> float:
    """MB/s of ``count`` GETs of ``size`` bytes at random offsets, ``concurrent`` at once."""
    import numpy as np
    import s3fs

    fs = s3fs.S3FileSystem(**so, skip_instance_cache=True, config_kwargs={"max_pool_connections": 64})
    rng = np.random.default_rng(0)
    infos = {p: fs.info(p)["size"] for p in paths}
    jobs = [(p, int(rng.integers(0, infos[p] - size))) for p in (paths * count)[:count]]
    fs.cat_file(paths[0], start=0, end=1)  # the session open before the clock
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrent) as ex:
        got = sum(len(d) for d in ex.map(lambda j: fs.cat_file(j[0], start=j[1], end=j[1] + size), jobs))
    return got / (time.perf_counter() - t0) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--records", type=int, default=1024)
    parser.add_argument("--latencies", default="0.005,0.02,0.05")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--peers", default=",".join(PEERS), help="peers to run beside ours ('' for none)")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-output"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("TFRECORD_TORCH_CACHE", os.path.join(args.out, "index-cache-bucket"))
    import tfrecord_torch as tt
    from benchmarks.cases.synth import synth_jpegs
    from tfrecord_torch.data.shards import expand_paths

    shards, per_shard = (2, 256) if args.quick else (4, 512)
    moto, moto_port = start_moto(os.path.join(args.out, "bucket-moto.log"))
    mirror = os.path.join(args.out, "bucket-mirror")
    proxy, port = start_proxy(moto_port, mirror)
    try:
        direct, so = options(moto_port), options(port)
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{moto_port}/bench", method="PUT")).read()
        local_dir = os.path.join(args.out, "bucket-local")
        os.makedirs(local_dir, exist_ok=True)
        jpegs = list(synth_jpegs(0, 64, 512, 90))
        for target, opts in ((local_dir, None), ("s3://bench/shards", direct)):
            with tt.ShardedWriter(target, name="bench", max_records=per_shard, storage_options=opts) as w:
                for i in range(shards * per_shard):
                    w.write(tt.make_example({"image": jpegs[i % 64], "label": i % 10}))
        import s3fs

        jpeg_dir = os.path.join(args.out, "bucket-jpegs")
        shutil.rmtree(jpeg_dir, ignore_errors=True)
        os.makedirs(jpeg_dir)
        for k, jpeg in enumerate(jpegs):
            with open(os.path.join(jpeg_dir, f"{k:02d}.jpg"), "wb") as f:
                f.write(jpeg)
        peers = [p for p in filter(None, args.peers.split(",")) if peer_python(p)]
        missing = [p for p in filter(None, args.peers.split(",")) if not peer_python(p)]
        for peer in missing:
            print(f"skipped {peer}: its venv is missing (see benchmarks/venvs/README.md)", flush=True)
        for peer in {PEERS[p][1]: p for p in peers}.values():  # the two streaming rows share shards
            write_peer(peer, jpeg_dir, shards, per_shard, args.out, direct, mirror)
        s3fs.S3FileSystem(**direct).get("bench/shards/", os.path.join(mirror, "bench", "shards") + "/",
                                        recursive=True)
        mean_kb = sum(len(j) for j in jpegs) / len(jpegs) / 1e3
        local_paths = sorted(expand_paths(os.path.join(local_dir, "bench-train.tfrecord-*"), None))
        remote_paths = [f"s3://bench/shards/{os.path.basename(p)}" for p in local_paths]
        latencies = [float(v) for v in args.latencies.split(",")]
        modes = args.modes.split(",")
        results: dict = {}
        for rnd in range(args.rounds):
            for mode in modes:
                for where in ["local", *latencies]:
                    if where == "local":
                        rate, first = run_mode(mode, local_paths, None, args.records)
                        gets = 0
                    else:
                        control(port, f"/__shape?latency={where}")
                        before = control(port, "/__stats")["shard_gets"]
                        rate, first = run_mode(mode, remote_paths, so, args.records)
                        gets = control(port, "/__stats")["shard_gets"] - before
                    results.setdefault((mode, where), []).append((rate, first, gets))
                    print(f"round {rnd} {mode} {where}: {rate:.0f} images/s, first batch {first:.2f} s, "
                          f"{gets} shard GETs", flush=True)
                    if where == "local" or mode not in PEER_MODES:
                        continue
                    ours = rate
                    for peer in peers:
                        control(port, f"/__shape?latency={where}")
                        before = control(port, "/__stats")["gets"]
                        rate, first = run_peer(peer, mode, port, shards, args.records)
                        gets = control(port, "/__stats")["gets"] - before
                        results.setdefault((peer, mode, where), []).append((rate, first, gets, rate / ours))
                        print(f"round {rnd} {peer} {mode} {where}: {rate:.0f} images/s ({rate / ours:.2f}x ours), "
                              f"first batch {first:.2f} s, {gets} GETs", flush=True)
        limits = []
        for lat in latencies:
            control(port, f"/__shape?latency={lat}")
            for size, concurrent in ((100_000, 1), (100_000, 32), (4 << 20, 1), (4 << 20, 16)):
                count = max(concurrent * 4, 16) if size > 1e6 else max(concurrent * 8, 32)
                mbs = limit(so, [p[len("s3://"):] for p in remote_paths], size, concurrent, count)
                limits.append((lat, size, concurrent, mbs))
                print(f"limit {lat} s: {concurrent} x {size} B GETs: {mbs:.0f} MB/s", flush=True)
    finally:
        proxy.terminate()
        moto.terminate()
    load = os.getloadavg()
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; Python "
             f"{platform.python_version()}; load average at the end {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}",
             f"Command: `nice -n 10 .venv/bin/python benchmarks/bucket.py{' --quick' if args.quick else ''}"
             f"{f' --rounds {args.rounds}' if args.rounds != 1 else ''}"
             f"{f' --latencies {args.latencies}' if args.latencies != '0.005,0.02,0.05' else ''}`; {shards} shards x {per_shard} JPEG "
             f"records (mean {mean_kb:.0f} KB), first {args.records} images per run, best of {args.rounds} "
             "round(s); bucket: moto behind benchmarks/shaped.py, 100 MB/s per connection",
             "", "| mode | storage | images/s | x local | first batch (s) | shard GETs per image |",
             "|---|---|---:|---:|---:|---:|"]
    for mode in modes:
        local_rate = max(r for r, _, _ in results[(mode, "local")])
        for where in ["local", *latencies]:
            runs = results[(mode, where)]
            rate = max(r for r, _, _ in runs)
            first = min(f for _, f, _ in runs)
            gets = min(g for _, _, g in runs)
            label = "local disk" if where == "local" else f"bucket, {where * 1000:g} ms"
            per = "-" if where == "local" else f"{gets / args.records:.3f}"
            lines.append(f"| {mode} | {label} | {rate:,.0f} | {rate / local_rate:.2f} | {first:.2f} | {per} |")
    lines += ["", "Shard GETs per image: the proxy's count of shard GETs from `iter(loader)` until the loader is "
              "dropped, over the images counted; read-ahead and the DataLoader's prefetch fetch records beyond "
              "them, so the figure overstates the cost per image a little."]
    peer_lines = ["", "Peers, each beside our same mode in the same round (the ratio per round, then for the "
                  "best images/s of each): the same payload bytes (our JPEGs and labels; as many shards) from the "
                  "same bucket through the same proxy, each in its own process under its venv, decoded with "
                  "torchvision's `decode_jpeg` (the decoder of the per-sample `Image()`) in 2 DataLoader workers, "
                  "batches of 64. webdataset: `wds.WebDataset(http URLs)` (streamed by curl), shuffled with "
                  "`shardshuffle` and `.shuffle(1000)`. mosaicml streaming: `StreamingDataset(remote='s3://...', "
                  "local=tmpdir, shuffle=...)` with `S3_ENDPOINT_URL` at the proxy, fresh local folder each run. "
                  "Ours checks every record's CRCs. GETs: all the peer's GETs in its process, per image counted.",
                  "", "| mode | reader | storage | images/s | x ours (per round) | x ours (best) | first batch (s) "
                  "| GETs per image | checksums |", "|---|---|---|---:|---|---:|---:|---:|---|"]
    for mode in [m for m in modes if m in PEER_MODES]:
        for where in latencies:
            ours = max(r for r, _, _ in results[(mode, where)])
            ours_first = min(f for _, f, _ in results[(mode, where)])
            peer_lines.append(f"| {mode} | ours | bucket, {where * 1000:g} ms | {ours:,.0f} | - | 1.00 | "
                              f"{ours_first:.2f} | - | CRC32C of every record |")
            for peer in peers:
                runs = results[(peer, mode, where)]
                rate = max(r for r, _, _, _ in runs)
                per_round = ", ".join(f"{x:.2f}" for _, _, _, x in runs)
                peer_lines.append(f"| {mode} | {peer} | bucket, {where * 1000:g} ms | {rate:,.0f} | {per_round} | "
                                  f"{rate / ours:.2f} | {min(f for _, f, _, _ in runs):.2f} | "
                                  f"{min(g for _, _, g, _ in runs) / args.records:.3f} | {PEER_CHECKS[peer]} |")
    for peer in missing:
        peer_lines.append(f"| - | {peer} | skipped | - | - | - | - | - | its venv is missing |")
    if peers or missing:
        lines += peer_lines
    lines += ["", "The limit: range GETs at random offsets through the same proxy, N at once (threads over s3fs).",
              "", "| latency | GET size | in flight | MB/s | 100 KB images/s equivalent |", "|---|---:|---:|---:|---:|"]
    for lat, size, concurrent, mbs in limits:
        lines.append(f"| {lat * 1000:g} ms | {size / 1e3:,.0f} KB | {concurrent} | {mbs:,.0f} | "
                     f"{mbs * 1e3 / mean_kb:,.0f} |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "bucket.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
