#!/usr/bin/env python
"""Start-up from a shaped bucket: the time from before the dataset is made to
its first batch, and a short run, with the requests of each phase counted by
kind at the proxy.

    nice -n 10 .venv/bin/python benchmarks/startup.py [--trees main=/path,branch=/path] [--rounds N]

The bucket is moto's S3 server behind benchmarks/shaped.py (first byte
``latency`` after each request, 100 MB/s per connection), holding 1,600
records of 100 KB (a ``RawTensor`` of 100,000 bytes and an int64 label) as
8 and as 64 shards, each with its index object (``index/<shard>.index``,
as ``ShardedWriter`` leaves them). Each run is a new process (the
interpreter, torch and the package imported before the clock starts) that
times three phases:

- open: ``TFRecordDataset(...)`` (the listing, the index objects);
- first batch: ``DataLoader(ds, num_workers=W)``, ``next(iter(loader))``
  (the workers' start, their checks and first reads);
- the rest: the other batches, to the end of the 1,600 records.

Each figure is printed beside the target ``1 s + 5 x latency`` (open and
first batch together) and the short run beside the same pipeline over the
same shards on local disk (local time / bucket time, the target >= 0.8).
The proxy counts each phase's requests by kind (LIST, HEAD, GET index, GET
data) and when they came in (the first and last of each kind, ms from the
phase's start). ``--trees`` names package trees (``name=path``, each on
PYTHONPATH in its runs) whose runs alternate within each round, the order
turned each round (each tree's modules compiled to bytecode first, so
none pays its compiling in a run). The moto row times bare requests in the same run: a
GET of an index object (moto answers it) and a 1-byte range GET (the
proxy's mirror answers it), after a warm-up, at each latency. The short
run's ceiling is timed in the same run too: a fresh process that only
imports s3fs, makes its session, lists the shards and fetches all their
bytes in 4 MiB ranges, every request at once, doing nothing with them.
Prints a Markdown table and writes DIR/startup.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = 1600
RECORD_BYTES = 100_000
BATCH = 64
KINDS = ("LIST", "HEAD", "GET index", "GET data")
PHASES = ("open", "first", "rest")


def _child(case: dict) -> None:
    """One run (in its own process, under the tree on PYTHONPATH): prints its figures as JSON."""
    import torch  # noqa: F401 - imported before the clock, as a training script has it
    from torch.utils.data import DataLoader

    import tfrecord_torch as tt

    def proxy(path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{case['port']}{path}") as r:
            return json.loads(r.read())

    features = {"data": tt.RawTensor("data", shape=(RECORD_BYTES,)), "label": tt.Int64("label")}
    remote = case["paths"][0].startswith("s3://")
    options: dict = {}
    if remote:
        cache = None if case["variant"] == "ranges" else tt.ShardCache(directory=case["cache_dir"])
        options = {"storage_options": case["so"], "source": tt.Source(cache=cache)}
        proxy("/__log")  # forget what came before
        fetched_before = proxy("/__stats")["shard_bytes"]
    batch_mode = case["kind"] == "batch"
    t0 = time.time()
    ds = tt.TFRecordDataset(case["paths"], features=features, shuffle=case["shuffle"],
                            batch_size=BATCH if batch_mode else None, **options)
    t1 = time.time()
    loader = DataLoader(ds, batch_size=None if batch_mode else BATCH, num_workers=case["workers"])
    seen = 0
    t2 = None
    for batch in loader:
        if t2 is None:
            t2 = time.time()
        seen += len(batch["label"])
    t3 = time.time()
    del loader
    if seen != case["records"]:
        raise SystemExit(f"read {seen} records, expected {case['records']}")
    phases: dict = {p: {} for p in PHASES}
    fetched = None  # the shards' bytes fetched, over the shards' size
    if remote:
        data = sum(os.path.getsize(p) for p in case["local_paths"])
        fetched = (proxy("/__stats")["shard_bytes"] - fetched_before) / data
        for at, kind in proxy("/__log"):
            phase, start = ("open", t0) if at < t1 else ("first", t1) if at < t2 else ("rest", t2)
            got = phases[phase].setdefault(kind, [0, None, None])
            got[0] += 1
            ms = (at - start) * 1000
            got[1] = ms if got[1] is None else min(got[1], ms)
            got[2] = ms if got[2] is None else max(got[2], ms)
    print(json.dumps({"open": t1 - t0, "first": t2 - t1, "total": t3 - t0, "phases": phases, "fetched": fetched}))


BARE_RANGE = 4 << 20  # the bare client's range requests, as long as the shard cache's


def _bare_child(case: dict) -> None:
    """The short run's ceiling (in its own process): import s3fs, make its
    session and list the shards with their sizes (open), then fetch every
    shard's bytes in 4 MiB ranges, all requests at once (s3fs's
    ``cat_ranges``), doing nothing with them; prints JSON."""
    import torch  # noqa: F401 - imported before the clock, as in a run of ours

    t0 = time.time()
    import s3fs

    fs = s3fs.S3FileSystem(**case["so"], skip_instance_cache=True)
    keys = [p[len("s3://"):] for p in case["paths"]]
    sizes = {e["name"]: e["size"] for e in fs.ls(os.path.dirname(keys[0]), detail=True)}
    t1 = time.time()
    ranges = [(k, start, min(start + BARE_RANGE, sizes[k])) for k in keys for start in range(0, sizes[k], BARE_RANGE)]
    got = fs.cat_ranges([k for k, _, _ in ranges], [a for _, a, _ in ranges], [b for _, _, b in ranges])
    t2 = time.time()
    if sum(map(len, got)) != sum(sizes[k] for k in keys):
        raise SystemExit(f"the bare client read {sum(map(len, got))} bytes of {sum(sizes[k] for k in keys)}")
    print(json.dumps({"open": t1 - t0, "total": t2 - t0}))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _control(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}") as r:
        return json.loads(r.read())


def _write(target: str, opts: dict | None, shards: int, records: int) -> None:
    import numpy as np

    import tfrecord_torch as tt

    rng = np.random.default_rng(0)
    blobs = [rng.integers(0, 256, RECORD_BYTES, dtype=np.uint8).tobytes() for _ in range(16)]
    with tt.ShardedWriter(target, name="s", max_records=records // shards, storage_options=opts) as w:
        for i in range(records):
            w.write(tt.make_example({"data": blobs[i % 16], "label": i}))


def _bare(so: dict, index_key: str, data_key: str, count: int = 15) -> tuple[float, float, float]:
    """Median seconds of a GET of the index object, a 1-byte range GET of a
    shard, and a HEAD of it, on a warm s3fs session."""
    import s3fs

    fs = s3fs.S3FileSystem(**so, skip_instance_cache=True)
    fs.cat_file(index_key)
    out = []
    for call in (lambda: fs.cat_file(index_key), lambda: fs.cat_file(data_key, start=0, end=1),
                 lambda: fs.info(data_key, refresh=True)):
        times = []
        for _ in range(count):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        out.append(statistics.median(times))
    return out[0], out[1], out[2]


def _phase_text(phases: dict) -> str:
    """``open: 1 LIST, 8 GET index (+21..+40 ms); first: ...``."""
    parts = []
    for phase in PHASES:
        got = phases.get(phase) or {}
        kinds = [f"{v[0]} {k} (+{v[1]:.0f}..{v[2]:.0f} ms)" if v[0] > 1 else f"{v[0]} {k} (+{v[1]:.0f} ms)"
                 for k, v in sorted(got.items(), key=lambda kv: kv[1][1])]
        if kinds:
            parts.append(f"{phase}: " + ", ".join(kinds))
    return "; ".join(parts)


def _fetched_text(runs: list[dict]) -> str:
    """The median over ``runs`` of the shards' bytes fetched over their size ("-" for local runs)."""
    got = [r["fetched"] for r in runs if r.get("fetched") is not None]
    return f"{statistics.median(got):.2f}" if got else "-"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] in ("--child", "--bare-child"):
        (_child if sys.argv[1] == "--child" else _bare_child)(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", default=f"this={ROOT}",
                        help="name=path,... : package trees whose runs alternate (each on PYTHONPATH)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--records", type=int, default=RECORDS, help="records in all (a multiple of each --shards)")
    parser.add_argument("--latencies", default="0.02")
    parser.add_argument("--shards", default="8,64")
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--orders", default="in order,shuffled")
    parser.add_argument("--kinds", default="sample,batch", help="sample (DataLoader batches) and/or batch "
                                                                 "(TFRecordDataset(batch_size=64))")
    parser.add_argument("--variants", default="cache,ranges",
                        help="cache: ShardCache in a fresh folder per run; ranges: cache=None")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-output"))
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # killed: the servers stop, the files go (finally)
    sys.path.insert(0, ROOT)
    from benchmarks.bucket import options, start_moto, start_proxy

    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    for tree in trees.values():  # each tree's modules compiled alike (PYTHONDONTWRITEBYTECODE would leave one not)
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "tfrecord_torch")], check=True)
    os.makedirs(args.out, exist_ok=True)
    load_start = os.getloadavg()
    work = tempfile.mkdtemp(prefix="startup-", dir=args.out)
    moto, moto_port = start_moto(os.path.join(work, "moto.log"))
    mirror = os.path.join(work, "mirror")
    proxy, port = start_proxy(moto_port, mirror)
    results: dict = {}
    bare: dict = {}
    ceilings: dict = {}  # (shards, latency) -> the bare client's runs
    try:
        import s3fs

        direct, so = options(moto_port), options(port)
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{moto_port}/bench", method="PUT")).read()
        sets = {}
        for n in map(int, args.shards.split(",")):
            local = os.path.join(work, f"local-{n}")
            os.makedirs(local)
            _write(local, None, n, args.records)
            _write(f"s3://bench/s{n}", direct, n, args.records)
            s3fs.S3FileSystem(**direct).get(f"bench/s{n}/", os.path.join(mirror, "bench", f"s{n}") + "/",
                                            recursive=True)
            names = sorted(f for f in os.listdir(local) if ".tfrecord-" in f)
            sets[n] = ([os.path.join(local, f) for f in names], [f"s3://bench/s{n}/{f}" for f in names])
        latencies = [float(v) for v in args.latencies.split(",")]
        cases = [(n, w, order, kind, variant, lat)
                 for lat in latencies for n in sets for w in map(int, args.workers.split(","))
                 for order in args.orders.split(",") for kind in args.kinds.split(",")
                 for variant in ["local", *args.variants.split(",")]]
        cases = [c for c in cases if c[4] != "local" or c[5] == latencies[0]]
        names = list(trees)
        for rnd in range(args.rounds):
            for lat in latencies:
                control_lat = _control(port, f"/__shape?latency={lat}")
                assert control_lat["latency"] == lat
                first_index = f"bench/s{min(sets)}/index/{os.path.basename(sets[min(sets)][1][0])}.index"
                bare.setdefault(lat, []).append(_bare(so, first_index, sets[min(sets)][1][0][len("s3://"):]))
                for n, (_, remote) in sets.items():
                    spec = {"paths": remote, "so": so, "records": args.records}
                    got = subprocess.run([sys.executable, os.path.abspath(__file__), "--bare-child", json.dumps(spec)],
                                         check=True, stdout=subprocess.PIPE, text=True, timeout=600)
                    ceilings.setdefault((n, lat), []).append(json.loads(got.stdout.strip().splitlines()[-1]))
            for case in cases:
                n, w, order, kind, variant, lat = case
                _control(port, f"/__shape?latency={lat}")
                order_names = names if rnd % 2 == 0 else names[::-1]
                for name in order_names:
                    cache_dir = tempfile.mkdtemp(prefix="cache-", dir=work)
                    local, remote = sets[n]
                    spec = {"paths": local if variant == "local" else remote, "so": so, "port": port,
                            "variant": variant, "workers": w, "shuffle": order == "shuffled", "kind": kind,
                            "cache_dir": cache_dir, "records": args.records, "local_paths": local}
                    env = {**os.environ, "PYTHONPATH": trees[name],
                           "TFRECORD_TORCH_CACHE": tempfile.mkdtemp(prefix="index-", dir=work)}
                    got = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                                         env=env, check=True, stdout=subprocess.PIPE, text=True, timeout=600)
                    run = json.loads(got.stdout.strip().splitlines()[-1])
                    shutil.rmtree(cache_dir, ignore_errors=True)
                    results.setdefault((case, name), []).append(run)
                    print(f"round {rnd} {name} {case}: open {run['open']:.3f} first {run['first']:.3f} "
                          f"total {run['total']:.3f} fetched {_fetched_text([run])} {_phase_text(run['phases'])}",
                          flush=True)
    finally:
        proxy.terminate()
        moto.terminate()
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; Python "
             f"{platform.python_version()}; load average at the start {load_start[0]:.1f}, {load_start[1]:.1f}, "
             f"{load_start[2]:.1f}; at the end {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}",
             "Command: `nice -n 10 .venv/bin/python " + shlex.join(["benchmarks/startup.py", *sys.argv[1:]]) + "`",
             f"Data: {args.records:,} records of {RECORD_BYTES // 1000} KB with index objects; batches of {BATCH}; "
             f"medians of {args.rounds} round(s); trees: " + ", ".join(f"{k} ({v})" for k, v in trees.items()),
             "", "| shards | workers | order | mode | storage | latency | tree | open s | first batch s | "
                 "open + first | target | all records s | local / this | shard bytes fetched / shards' bytes | "
                 "requests by phase |",
             "|---:|---:|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (case, name), runs in results.items():
        n, w, order, kind, variant, lat = case
        med = {k: statistics.median(r[k] for r in runs) for k in ("open", "first", "total")}
        local_runs = results.get(((n, w, order, kind, "local", latencies[0]), name))
        ratio = (statistics.median(r["total"] for r in local_runs) / med["total"]) if local_runs else None
        target = 1 + 5 * lat
        shown_lat = "-" if variant == "local" else f"{lat * 1000:g} ms"
        lines.append(f"| {n} | {w} | {order} | {kind} | {variant} | {shown_lat} | {name} | {med['open']:.3f} | "
                     f"{med['first']:.3f} | {med['open'] + med['first']:.3f} | "
                     f"{'-' if variant == 'local' else f'{target:.2f}'} | {med['total']:.3f} | "
                     f"{'-' if ratio is None or variant == 'local' else f'{ratio:.2f}'} | "
                     f"{_fetched_text(runs)} | {_phase_text(runs[-1]['phases'])} |")
    lines += ["", "Bare requests through the proxy on a warm session (median of 15 each, per round): "
              "the floor under each round trip, moto's own cost included where it answers."]
    for lat, rows in bare.items():
        for rnd, (index_get, range_get, head) in enumerate(rows):
            lines.append(f"- {lat * 1000:g} ms, round {rnd}: GET of an index object (moto) {index_get * 1000:.1f} ms, "
                         f"1-byte range GET (mirror) {range_get * 1000:.1f} ms, HEAD (moto) {head * 1000:.1f} ms")
    lines += ["", "The short run's ceiling, in the same run: a fresh process (torch imported first) that only "
              "imports s3fs, makes its session, lists the shards, and fetches all their bytes in 4 MiB ranges, "
              "every request at once (`fs.cat_ranges`), doing nothing with them (medians over rounds):"]
    for (n, lat), runs in ceilings.items():
        total = statistics.median(r["total"] for r in runs)
        locals_ = [r["total"] for (c, _), rs in results.items() if c[0] == n and c[4] == "local" for r in rs]
        local = statistics.median(locals_) if locals_ else None
        ratio = "no local run" if local is None else \
            f"local / this at most {local / total:.2f} (the local runs' median {local:.3f} s)"
        lines.append(f"- {n} shards, {lat * 1000:g} ms: open (import, session, listing) "
                     f"{statistics.median(r['open'] for r in runs):.3f} s, all bytes {total:.3f} s; {ratio}")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "startup.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
