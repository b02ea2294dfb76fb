#!/usr/bin/env python
"""Training reads from a shaped bucket: each reading mode through the
DataLoader at several first-byte latencies, beside the same pipeline on local
disk and beside the limit (N concurrent range GETs through the same proxy).

    nice -n 10 .venv/bin/python benchmarks/bucket.py [--quick] [--rounds N] [--out DIR]

The bucket is moto's S3 server (its own process) behind benchmarks/shaped.py
(its own process): first byte ``latency`` after the request, 100 MB/s per
connection, any number of connections. Records are ~100 KB JPEGs (512x512,
quality 90) with a label; the pipeline decodes them to uint8 [3, 512, 512]
with ``Image()`` in 2 DataLoader workers, batches of 64. Modes: in order,
``shuffle=True``, map-style with a RandomSampler, batch mode
(``shuffle=True, batch_size=64``).

Ours reads the bucket two ways (``--variants``): through the shard cache
(``ShardCache(directory=...)`` in a folder created empty for each run, so
the copying of whole shards is inside the timed window), and by range
requests (``cache=None``). With the cache, a second-epoch row (``--warm-at``)
reads shuffle=True again over the copies the cold run made. Each row:
images/s over the first ``--records`` images, the time from ``iter(loader)``
to the first batch, and the shard GETs per image and MB fetched per MB of
records used (counted by the proxy). Rounds interleave the storages.

A second data set of small records (``--small``: an int64 label and 32
floats, the records of benchmarks/cases/small.py) is read in order and with
shuffle=True in batches of 256, on local disk and from the bucket both ways.

Beside our shard cache row of the modes they have (in order, shuffled), the
peers read the same payload bytes from the same bucket through the same
proxy, each in its own process under its venv (benchmarks/bucket_peers.py;
a peer whose venv is missing is skipped with a note): webdataset tar shards
and mosaicml streaming MDS shards, as many shards as ours, each row with its
ratio to our same mode in the same round; mosaicml streaming also reads the
small records from MDS shards of the same fields.
Prints a Markdown table and writes DIR/bucket.md (DIR: bench-output).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MODES = ("in order", "shuffle=True", "map-style RandomSampler", "batch mode shuffle=True")
BATCH = 64
PEERS_SCRIPT = os.path.join(ROOT, "benchmarks", "bucket_peers.py")
# Each peer's venv (benchmarks/venvs/README.md) and where its shards live in the bucket.
PEERS = {"webdataset": ("webdataset", "wds"), "mosaicml-streaming": ("mosaicml-streaming", "mds"),
         "mosaicml-streaming + xxh64": ("mosaicml-streaming", "mds")}
PEER_MODES = ("in order", "shuffle=True")  # every peer's
MAP_PEERS = ("mosaicml-streaming", "mosaicml-streaming + xxh64")  # with a map-style RandomSampler row
SMALL_MODES = ("in order", "shuffle=True")
SMALL_BATCH = 256
SMALL_FLOATS = 32
SMALL_PEERS = ("mosaicml-streaming", "mosaicml-streaming + xxh64")  # the peers with a small-record writer
VARIANTS = {"cache": "shard cache (default)", "ranges": "range reads (cache=None)"}
PEER_CHECKS = {"webdataset": "none", "mosaicml-streaming": "none (hashes written, not checked)",
               "mosaicml-streaming + xxh64": "xxh64 of each shard"}


def peer_python(peer: str) -> str | None:
    """The peer's venv interpreter, or None when it is not installed."""
    venvs = os.environ.get("TFRECORD_BENCH_VENVS", os.path.join(ROOT, "benchmarks", "venvs"))
    path = os.path.join(venvs, PEERS[peer][0], "bin", "python")
    return path if os.access(path, os.X_OK) else None


def peer_prefix(peer: str, data: str) -> str:
    """Where the peer's shards of ``data`` ("images" or "small") live in the bucket."""
    return PEERS[peer][1] + ("-small" if data == "small" else "")


def write_peer(peer: str, data: str, source: str, shards: int, per_shard: int, out: str, direct: dict,
               mirror: str) -> None:
    """The peer's shards of the same payloads (``source``: the JPEG folder, or
    the small records' .npy), uploaded to the bucket and copied into the proxy's mirror."""
    import s3fs

    prefix = peer_prefix(peer, data)
    local = os.path.join(out, f"bucket-{prefix}")
    shutil.rmtree(local, ignore_errors=True)
    subprocess.run([peer_python(peer), PEERS_SCRIPT, "write", "--peer", peer, "--data", data, "--source", source,
                    "--shards", str(shards), "--per-shard", str(per_shard), "--out", local], check=True)
    s3fs.S3FileSystem(**direct).put(local + "/", f"bench/{prefix}/", recursive=True)
    shutil.copytree(local, os.path.join(mirror, "bench", prefix), dirs_exist_ok=True)


def run_peer(peer: str, mode: str, port: int, shards: int, data: str, records: int,
             bucket: tuple[int, ...] = ()) -> Run:
    """The peer reading ``data`` ("images" or "small") through the proxy at
    ``port``: all its GETs and their bytes, from its process start to its end,
    and the CPU of the ``bucket`` processes over that time."""
    before, cpu = control(port, "/__stats"), cpu_seconds(bucket)
    proc = subprocess.run([peer_python(peer), PEERS_SCRIPT, "read", "--peer", peer, "--mode", mode, "--endpoint",
                           f"http://127.0.0.1:{port}", "--bucket", "bench", "--prefix", peer_prefix(peer, data),
                           "--shards", str(shards), "--records", str(records), "--data", data],
                          check=True, stdout=subprocess.PIPE, text=True, timeout=900)
    after = control(port, "/__stats")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return Run(got["rate"], got["first"], got["seen"], after["gets"] - before["gets"], after["bytes"] - before["bytes"],
               cpu_seconds(bucket) - cpu)


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


class Data(NamedTuple):
    """One data set: its shards on local disk and in the bucket, and how a run reads it."""

    name: str  # "images" or "small records"
    local: list[str]
    remote: list[str]
    features: dict
    batch: int
    records: int  # items per run
    record_bytes: float  # mean bytes of a record in the shards, framing included


class Run(NamedTuple):
    """One reading run: items/s and what it cost at the proxy."""

    rate: float  # items/s over the items seen
    first: float  # seconds from iter(loader) to the first batch
    seen: int
    gets: int  # shard GETs (all GETs for a peer)
    fetched: int  # body bytes of those GETs
    bucket_cpu: float = 0.0  # CPU seconds the bucket (moto and the proxy) spent during the run
    reader_cpu: float = 0.0  # CPU seconds of the reading process and its DataLoader workers

    def cpu_per_item(self) -> float:
        """The reader's CPU seconds per item (the startup's included)."""
        return self.reader_cpu / max(self.seen, 1)

    def after_first(self, batch: int) -> float:
        """Items/s from the first batch to the end of the run."""
        return (self.seen - batch) / max(self.seen / self.rate - self.first, 1e-9)

    def bucket_cores(self) -> float:
        """The bucket's CPU over the run's time: cores taken from the reader's machine."""
        return self.bucket_cpu * self.rate / self.seen


def cpu_seconds(pids: tuple[int, ...]) -> float:
    """User + system CPU seconds of processes (Linux /proc; 0 elsewhere)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def tree_cpu() -> float:
    """User + system CPU seconds of this process and its children waited for
    (the DataLoader workers of the runs that ended)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def loader_of(mode: str, data: Data, so: dict | None, cache, epoch: int = 0):
    """The DataLoader of ``mode``: local shards when ``so`` is None, else the
    bucket's, read through ``cache`` (a ShardCache, or None for range reads)."""
    import torch
    from torch.utils.data import DataLoader

    from tfrecord_torch import IndexedTFRecordDataset, Source, TFRecordDataset

    if so is None:
        paths, remote, mapped = data.local, {}, {}
    else:
        paths, remote, mapped = (data.remote, {"storage_options": so, "source": Source(cache=cache)},
                                 {"storage_options": so, "cache": cache})
    if mode == "map-style RandomSampler":
        ds = IndexedTFRecordDataset(paths, features=data.features, **mapped)
        sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(epoch))
        return DataLoader(ds, batch_size=data.batch, sampler=sampler, num_workers=2)
    batch_mode = mode == "batch mode shuffle=True"
    ds = TFRecordDataset(paths, features=data.features, shuffle=mode != "in order",
                         batch_size=data.batch if batch_mode else None, **remote)
    ds.set_epoch(epoch)
    return DataLoader(ds, batch_size=None if batch_mode else data.batch, num_workers=2)


def run_mode(mode: str, data: Data, so: dict | None, cache, port: int, budget: float, epoch: int = 0,
             bucket: tuple[int, ...] = ()) -> Run:
    """Items/s over the first ``data.records`` items (or what ``budget`` seconds
    gave), the seconds to the first batch, and the proxy's shard GETs and bytes
    and the ``bucket`` processes' CPU from ``iter(loader)`` until the loader's
    workers are gone."""
    loader = loader_of(mode, data, so, cache, epoch)
    before, cpu, mine = control(port, "/__stats"), cpu_seconds(bucket), tree_cpu()
    t0 = time.perf_counter()
    seen, first = 0, None
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
        seen += len(batch["label"])
        if seen >= data.records or time.perf_counter() - t0 > budget:
            break
    elapsed = time.perf_counter() - t0
    del loader, batch  # the iterator went at the break: its workers are shut down (and waited for)
    after = control(port, "/__stats")
    return Run(seen / elapsed, first or 0.0, seen, after["shard_gets"] - before["shard_gets"],
               after["shard_bytes"] - before["shard_bytes"], cpu_seconds(bucket) - cpu, tree_cpu() - mine)


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


class Storage(NamedTuple):
    """One row kind of the tables: where the shards are read from, and how."""

    label: str
    latency: float | None  # None: local disk
    variant: str | None  # a key of VARIANTS
    warm: bool = False  # a second epoch over the copies the cold run made


def storages_of(latencies: list[float], variants: list[str], warm_at: float | None) -> list[Storage]:
    rows = [Storage("local disk", None, None)]
    for lat in latencies:
        for v in variants:
            rows.append(Storage(f"bucket, {lat * 1000:g} ms, {VARIANTS[v]}", lat, v))
            if v == "cache" and lat == warm_at:
                rows.append(Storage(f"bucket, {lat * 1000:g} ms, shard cache, second epoch (warm)", lat, v, True))
    return rows


def write_data(target: str, opts: dict | None, name: str, shards: int, per_shard: int, record) -> None:
    import tfrecord_torch as tt

    with tt.ShardedWriter(target, name=name, max_records=per_shard, storage_options=opts) as w:
        for i in range(shards * per_shard):
            w.write(record(i))


class Round:
    """One round over a data set: every mode, every storage, each peer beside
    our reference row (the shard cache's when it runs) in the same round."""

    def __init__(self, args, port: int, so: dict, cache_root: str, results: dict, bucket: tuple[int, ...]) -> None:
        self.args, self.port, self.so, self.cache_root, self.results = args, port, so, cache_root, results
        self.bucket = bucket  # the pids of moto and the proxy

    def ours(self, rnd: int, data: Data, mode: str, st: Storage, kept: dict) -> Run:
        from tfrecord_torch import ShardCache

        if st.latency is None:
            return run_mode(mode, data, None, None, self.port, self.args.budget, bucket=self.bucket)
        control(self.port, f"/__shape?latency={st.latency}")
        folder = None
        if st.variant == "cache":
            folder = kept.pop("folder") if st.warm else tempfile.mkdtemp(dir=self.cache_root)
        run = run_mode(mode, data, self.so, ShardCache(directory=folder) if folder else None, self.port,
                       self.args.budget, epoch=1 if st.warm else 0, bucket=self.bucket)
        if folder and not st.warm and mode == "shuffle=True" and st.latency == self.args.warm_at:
            kept["folder"] = folder  # the warm row reads these copies next
        elif folder:
            shutil.rmtree(folder, ignore_errors=True)
        return run

    def run(self, rnd: int, data: Data, modes: list[str], storages: list[Storage], peers: list[str],
            peer_modes: tuple, peer_data: str, unit: str) -> None:
        for mode in modes:
            kept: dict = {}
            for st in storages:
                if st.warm and mode != "shuffle=True":
                    continue
                run = self.ours(rnd, data, mode, st, kept)
                self.results.setdefault((data.name, mode, st.label), []).append(run)
                print(f"round {rnd} {data.name} {mode} {st.label}: {run.rate:,.0f} {unit}/s, first batch "
                      f"{run.first:.2f} s, then {run.after_first(data.batch):,.0f} {unit}/s, {run.gets} shard GETs, "
                      f"{run.fetched / 1e6:.1f} MB, bucket CPU {run.bucket_cores():.2f} cores, reader CPU "
                      f"{run.cpu_per_item() * 1e6:,.1f} us/{unit[:-1]}", flush=True)
                if st.latency is None or st.warm or st.variant != self.reference:
                    continue
                for peer in peers_in(mode, peers, peer_modes):
                    control(self.port, f"/__shape?latency={st.latency}")
                    got = run_peer(peer, mode, self.port, len(data.remote), peer_data, data.records,
                                   self.bucket)
                    self.results.setdefault((data.name, mode, peer, st.latency), []).append((got, got.rate / run.rate))
                    print(f"round {rnd} {data.name} {peer} {mode} {st.latency * 1000:g} ms: {got.rate:,.0f} {unit}/s "
                          f"({got.rate / run.rate:.2f}x ours), first batch {got.first:.2f} s, {got.gets} GETs, "
                          f"{got.fetched / 1e6:.1f} MB", flush=True)

    @property
    def reference(self) -> str:
        """The variant the peers are set beside: the shard cache when it runs."""
        variants = self.args.variants.split(",")
        return "cache" if "cache" in variants else variants[0]


def per_item(x: float) -> str:
    """A count per item, legible both near 1 and near 1/100,000."""
    return "0" if x == 0 else f"{x:.3f}" if x >= 0.01 else f"{x:.2g}"


def peers_in(mode: str, peers: list[str], peer_modes: tuple) -> list[str]:
    """The peers that read ``mode``."""
    if mode == "map-style RandomSampler":
        return [p for p in peers if p in MAP_PEERS]
    return peers if mode in peer_modes else []


def table(data: Data, modes: list[str], storages: list[Storage], results: dict, unit: str) -> list[str]:
    per = unit[:-1] if unit.endswith("s") else unit
    lines = [f"| mode | storage | {unit}/s | x local (best) | x local (per round) | first batch (s) "
             f"| x local after the first batch (best) | bucket CPU (cores) | reader CPU per {per} (us) "
             f"| shard GETs per {per} | MB fetched per MB used |", "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for mode in modes:
        local = results[(data.name, mode, "local disk")]
        best_local = max(r.rate for r in local)
        best_local_after = max(r.after_first(data.batch) for r in local)
        for st in storages:
            runs = results.get((data.name, mode, st.label))
            if not runs:
                continue
            rate = max(r.rate for r in runs)
            rounds = ", ".join(f"{r.rate / lr.rate:.2f}" for r, lr in zip(runs, local))
            if st.latency is None:
                gets = fetched = "-"
            else:
                gets = per_item(min(r.gets / r.seen for r in runs))
                fetched = f"{min(r.fetched / (r.seen * data.record_bytes) for r in runs):.2f}"
            after = max(r.after_first(data.batch) for r in runs)
            cores = "-" if st.latency is None else f"{max(r.bucket_cores() for r in runs):.2f}"
            cpu = min(r.cpu_per_item() for r in runs) * 1e6
            lines.append(f"| {mode} | {st.label} | {rate:,.0f} | {rate / best_local:.2f} | {rounds} | "
                         f"{min(r.first for r in runs):.2f} | {after / best_local_after:.2f} | {cores} | {cpu:,.1f} | "
                         f"{gets} | {fetched} |")
    return lines


def peer_table(data: Data, modes: list[str], latencies: list[float], peers: list[str], missing: list[str],
               reference: str, results: dict, unit: str, modes_of_peers: tuple) -> list[str]:
    per = unit[:-1] if unit.endswith("s") else unit
    lines = [f"| mode | reader | storage | {unit}/s | x ours (per round) | x ours (best) | first batch (s) "
             f"| GETs per {per} | MB fetched per MB used | checksums |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---|"]
    for mode in [m for m in modes if peers_in(m, peers, modes_of_peers)]:
        for lat in latencies:
            ours_runs = results[(data.name, mode, f"bucket, {lat * 1000:g} ms, {VARIANTS[reference]}")]
            ours = max(r.rate for r in ours_runs)
            lines.append(f"| {mode} | ours, {VARIANTS[reference]} | bucket, {lat * 1000:g} ms | {ours:,.0f} | - | "
                         f"1.00 | {min(r.first for r in ours_runs):.2f} | "
                         f"{per_item(min(r.gets / r.seen for r in ours_runs))} | "
                         f"{min(r.fetched / (r.seen * data.record_bytes) for r in ours_runs):.2f} | "
                         "CRC32C of every record |")
            for peer in peers_in(mode, peers, modes_of_peers):
                runs = results[(data.name, mode, peer, lat)]
                rate = max(r.rate for r, _ in runs)
                lines.append(f"| {mode} | {peer} | bucket, {lat * 1000:g} ms | {rate:,.0f} | "
                             f"{', '.join(f'{x:.2f}' for _, x in runs)} | {rate / ours:.2f} | "
                             f"{min(r.first for r, _ in runs):.2f} | {per_item(min(r.gets / r.seen for r, _ in runs))} | "
                             f"{min(r.fetched / (r.seen * data.record_bytes) for r, _ in runs):.2f} | "
                             f"{PEER_CHECKS[peer]} |")
    for peer in missing:
        lines.append(f"| - | {peer} | skipped | - | - | - | - | - | - | its venv is missing |")
    return lines


def prebuild_indexes(data: Data, so: dict) -> None:
    """Index the bucket's shards once, before any clock (the index cache keeps them)."""
    from tfrecord_torch import IndexedTFRecordDataset, Source, TFRecordDataset

    len(IndexedTFRecordDataset(data.remote, features=data.features, storage_options=so, cache=None))
    len(TFRecordDataset(data.remote, features=data.features, storage_options=so, source=Source(cache=None)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller shards and runs (a smoke run)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--records", type=int, default=1024, help="images per run")
    parser.add_argument("--shards", type=int, default=None, help="image shards (default 4; 2 with --quick)")
    parser.add_argument("--per-shard", type=int, default=None, help="images per shard (default 512; 256 with --quick)")
    parser.add_argument("--latencies", default="0.005,0.02,0.05")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="how ours reads the bucket: cache (a ShardCache in a fresh folder per run), "
                             "ranges (cache=None)")
    parser.add_argument("--warm-at", type=float, default=0.02,
                        help="the latency of the second-epoch (warm cache) shuffle=True row; -1 for none")
    parser.add_argument("--images", action=argparse.BooleanOptionalAction, default=True,
                        help="read the data set of JPEG images (--no-images: the small records alone)")
    parser.add_argument("--small", action=argparse.BooleanOptionalAction, default=True,
                        help="also read a data set of small records (int64 label + 32 floats)")
    parser.add_argument("--small-records", type=int, default=None,
                        help="small records per run (default 100,000; 8,192 with --quick)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds a run of ours may take before it stops counting (default 30; 10 with --quick)")
    parser.add_argument("--peers", default=",".join(PEERS), help="peers to run beside ours ('' for none)")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-output"))
    args = parser.parse_args()
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            parser.error(f"--variants: {v!r} is not one of {', '.join(VARIANTS)}")
    for peer in filter(None, args.peers.split(",")):
        if peer not in PEERS:
            parser.error(f"--peers: {peer!r} is not one of {', '.join(PEERS)}")
    if not (args.images or args.small):
        parser.error("--no-images --no-small reads nothing")
    args.budget = args.budget or (10.0 if args.quick else 30.0)
    small_records = args.small_records or (8192 if args.quick else 100_000)
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("TFRECORD_TORCH_CACHE", os.path.join(args.out, "index-cache-bucket"))
    load_start = os.getloadavg()
    import numpy as np
    import s3fs

    import tfrecord_torch as tt
    from benchmarks.cases.small import _small_example
    from benchmarks.cases.synth import synth_jpegs
    from tfrecord_torch.data.shards import expand_paths

    shards, per_shard = (2, 256) if args.quick else (4, 512)
    shards, per_shard = args.shards or shards, args.per_shard or per_shard
    small_shards, small_per_shard = (2, 10_000) if args.quick else (4, 50_000)
    latencies = [float(v) for v in args.latencies.split(",")]
    warm_at = args.warm_at if "cache" in variants and args.warm_at in latencies else None
    args.warm_at = warm_at
    modes = args.modes.split(",")
    moto, moto_port = start_moto(os.path.join(args.out, "bucket-moto.log"))
    mirror = os.path.join(args.out, "bucket-mirror")
    shutil.rmtree(mirror, ignore_errors=True)
    proxy, port = start_proxy(moto_port, mirror)
    cache_root = os.path.join(args.out, "bucket-shard-caches")
    shutil.rmtree(cache_root, ignore_errors=True)
    os.makedirs(cache_root)
    try:
        direct, so = options(moto_port), options(port)
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{moto_port}/bench", method="PUT")).read()
        jpegs = list(synth_jpegs(0, 64, 512, 90))
        xs = np.random.default_rng(0).standard_normal((small_shards * small_per_shard, SMALL_FLOATS),
                                                      dtype=np.float32)
        sets = []
        if args.images:
            sets.append(("images", "bench", "shards", shards, per_shard,
                         lambda i: tt.make_example({"image": jpegs[i % 64], "label": i % 10})))
        if args.small:
            sets.append(("small records", "small", "small", small_shards, small_per_shard,
                         lambda i: _small_example(tt.make_example, i % 1000, xs[i])))
        data_sets = []
        for name, stem, key, n, per, record in sets:
            local_dir = os.path.join(args.out, f"bucket-local-{key}")
            shutil.rmtree(local_dir, ignore_errors=True)
            os.makedirs(local_dir)
            write_data(local_dir, None, stem, n, per, record)
            write_data(f"s3://bench/{key}", direct, stem, n, per, record)
            s3fs.S3FileSystem(**direct).get(f"bench/{key}/", os.path.join(mirror, "bench", key) + "/", recursive=True)
            local = sorted(expand_paths(os.path.join(local_dir, f"{stem}-train.tfrecord-*"), None))
            images = name == "images"
            features = ({"image": tt.Image("image"), "label": tt.Int64("label")} if images else
                        {"label": tt.Int64("label"), "x": tt.Float("x", shape=(SMALL_FLOATS,))})
            data_sets.append(Data(name, local, [f"s3://bench/{key}/{os.path.basename(p)}" for p in local], features,
                                  BATCH if images else SMALL_BATCH, args.records if images else small_records,
                                  sum(os.path.getsize(p) for p in local) / (n * per)))
        # the peers' shards of the same payloads
        jpeg_dir = os.path.join(args.out, "bucket-jpegs")
        shutil.rmtree(jpeg_dir, ignore_errors=True)
        os.makedirs(jpeg_dir)
        for k, jpeg in enumerate(jpegs):
            with open(os.path.join(jpeg_dir, f"{k:02d}.jpg"), "wb") as f:
                f.write(jpeg)
        small_npy = os.path.join(args.out, "bucket-small.npy")
        np.save(small_npy, xs)
        asked = list(filter(None, args.peers.split(",")))
        peers = [p for p in asked if peer_python(p)]
        missing = [p for p in asked if not peer_python(p)]
        for peer in missing:
            print(f"skipped {peer}: its venv is missing (see benchmarks/venvs/README.md)", flush=True)
        small_peers = [p for p in peers if p in SMALL_PEERS]
        for peer in {PEERS[p][1]: p for p in peers if args.images}.values():  # the two streaming rows share shards
            write_peer(peer, "images", jpeg_dir, shards, per_shard, args.out, direct, mirror)
        if args.small:
            for peer in {PEERS[p][1]: p for p in small_peers}.values():
                write_peer(peer, "small", small_npy, small_shards, small_per_shard, args.out, direct, mirror)
        for data in data_sets:
            prebuild_indexes(data, so)
        storages = storages_of(latencies, variants, warm_at)
        results: dict = {}
        rounds = Round(args, port, so, cache_root, results, (moto.pid, proxy.pid))
        for rnd in range(args.rounds):
            if args.images:
                rounds.run(rnd, data_sets[0], modes, storages, peers, PEER_MODES, "images", "images")
            if args.small:
                rounds.run(rnd, data_sets[-1], list(SMALL_MODES), storages, small_peers, SMALL_MODES, "small",
                           "records")
        remote_paths = data_sets[0].remote
        limits = []
        for lat in latencies if args.images else ():
            control(port, f"/__shape?latency={lat}")
            for size, concurrent in ((100_000, 1), (100_000, 32), (4 << 20, 1), (4 << 20, 16)):
                count = max(concurrent * 4, 16) if size > 1e6 else max(concurrent * 8, 32)
                mbs = limit(so, [p[len("s3://"):] for p in remote_paths], size, concurrent, count)
                limits.append((lat, size, concurrent, mbs))
                print(f"limit {lat} s: {concurrent} x {size} B GETs: {mbs:.0f} MB/s", flush=True)
    finally:
        proxy.terminate()
        moto.terminate()
        shutil.rmtree(cache_root, ignore_errors=True)
    images = data_sets[0]
    mean_kb = sum(len(j) for j in jpegs) / len(jpegs) / 1e3
    load = os.getloadavg()
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; Python "
             f"{platform.python_version()}; load average at the start {load_start[0]:.1f}, {load_start[1]:.1f}, "
             f"{load_start[2]:.1f}; at the end {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}",
             "Command: `nice -n 10 .venv/bin/python " + shlex.join(["benchmarks/bucket.py", *sys.argv[1:]]) + "`"]
    if args.images:
        lines += [f"Images: {shards} shards x {per_shard} JPEG records (mean {mean_kb:.0f} KB), first {args.records} "
                  f"images per run, best of {args.rounds} round(s); bucket: moto behind benchmarks/shaped.py, "
                  "100 MB/s per connection; a run stops counting at its images or after "
                  f"{args.budget:g} s, whichever comes first",
                  "", *table(images, modes, storages, results, "images")]
    lines += ["", "Storage: *local disk* is the same pipeline over a local copy of the shards. *shard cache "
              "(default)* passes `ShardCache(directory=<an empty folder>)` (`TFRecordDataset(source=Source(cache="
              "...))`, `IndexedTFRecordDataset(cache=...)`): whole shards are copied to the folder ahead of use and "
              "read from there; the folder is new and empty for each run, so the copying is inside the timed "
              "window (a cold start). *range reads (cache=None)* reads each record from the bucket by range "
              "requests as it goes."
              + (" *second epoch (warm)* is a new loader for epoch 1 over the folder the cold shard cache run "
                 "above it filled (shuffle=True only)." if warm_at is not None else ""),
              "",
              "x local after the first batch: images/s from the first batch to the end of the run, over the "
              "same for local disk (the time to the first batch is its own column). Bucket CPU: the CPU time moto "
              "and the proxy spent during the run over the run's time, in cores; they share the machine's cores "
              "with the reader, which a real bucket does not. Reader CPU: the user + system CPU time of the "
              "reading process and its DataLoader workers from `iter(loader)` until the workers are gone, over "
              "the items counted (the least of the rounds).",
              "",
              "Shard GETs per image: the proxy's count of GETs of shard objects (ranges and whole objects alike, "
              "the cache's copies included) from `iter(loader)` until the loader's workers are gone, over the "
              "images counted. MB fetched per MB used: the body bytes of those GETs over the bytes of the records "
              "counted. Read-ahead, the DataLoader's prefetch and the cache's copies of whole shards fetch records "
              "beyond the ones counted (a run reads the first part of an epoch), so both overstate the cost per "
              "image of a whole epoch."]
    if args.small:
        small = data_sets[-1]
        lines += ["", f"Small records: {small_shards} shards x {small_per_shard:,} tf.train.Examples of an int64 "
                  f"`label` and {SMALL_FLOATS} floats `x` ({small.record_bytes:.0f} bytes per record with framing; "
                  "the records of benchmarks/cases/small.py), parsed to an int64 tensor and a float32 tensor "
                  f"[{SMALL_FLOATS}] in 2 DataLoader workers, batches of {SMALL_BATCH}; first {small.records:,} "
                  f"records per run, or as many as {args.budget:g} s gave. Storage and columns as above, per record.", "",
                  *table(small, list(SMALL_MODES), storages, results, "records")]
    peer_lines = ["", "Peers, each beside our " + VARIANTS[rounds.reference] + " row of the same mode in the same "
                  "round (the ratio per round, then for the best images/s of each): the same payload bytes (our "
                  "JPEGs and labels; as many shards) from the same bucket through the same proxy, each in its own "
                  "process under its venv, decoded with torchvision's `decode_jpeg` (the pixels of the per-sample "
                  "`Image()`, which decodes by libjpeg-turbo's accurate IDCT too) in 2 DataLoader workers, batches of 64. webdataset: `wds.WebDataset(http URLs)` "
                  "(streamed by curl), shuffled with `shardshuffle` and `.shuffle(1000)`. mosaicml streaming: "
                  "`StreamingDataset(remote='s3://...', local=tmpdir, shuffle=...)` with `S3_ENDPOINT_URL` at the "
                  "proxy, a fresh local folder each run; its map-style RandomSampler row samples a map-style view of the "
                  "StreamingDataset (`dataset.get_item(i)`, which downloads the sample's shard whole the first time); "
                  "webdataset has no random access. Ours checks every record's CRCs. GETs and MB: all the "
                  "peer's GETs in its process, over the images counted and their bytes in our shards.", "",
                  *(peer_table(images, modes, latencies, peers, missing, rounds.reference, results, "images",
                               PEER_MODES) if args.images else [])]
    if args.images and (peers or missing):
        lines += peer_lines
    if args.small:
        if small_peers:
            lines += ["", "Small-record peers: mosaicml streaming MDS shards of the same fields (`label` int, `x` "
                      f"ndarray float32 [{SMALL_FLOATS}], as many shards), read as above with batches of "
                      f"{SMALL_BATCH}. webdataset has no small-record row (it would store each record as files in "
                      "a tar).", "",
                      *peer_table(data_sets[-1], list(SMALL_MODES), latencies, small_peers, [], rounds.reference,
                                  results, "records", SMALL_MODES)]
        else:
            lines += ["", "Small records have no peer rows: mosaicml streaming's venv is missing."]
    if limits:
        lines += ["", "The limit: range GETs at random offsets through the same proxy, N at once (threads over s3fs).",
                  "", "| latency | GET size | in flight | MB/s | 100 KB images/s equivalent |",
                  "|---|---:|---:|---:|---:|"]
    for lat, size, concurrent, mbs in limits:
        lines.append(f"| {lat * 1000:g} ms | {size / 1e3:,.0f} KB | {concurrent} | {mbs:,.0f} | "
                     f"{mbs * 1e3 / mean_kb:,.0f} |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "bucket.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
