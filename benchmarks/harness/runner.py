"""The parent process: build the data sets, run every contender in a process of its own,
interleave the contenders in rounds, pool their passes, and compute medians and ratios."""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.harness.registry import CASES, UNITS, Case, Dataset, Impl, interpreter
from benchmarks.harness.worker import RESULT_MARK

RUN_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run.py")
DATA_VERSION = 1  # bump when a builder changes what it writes


def files_of(path: str) -> list[str]:
    """The file, or every file under the folder."""
    if not os.path.isdir(path):
        return [path]
    return sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names)


def disk_bytes(path: str) -> int:
    return sum(os.path.getsize(f) for f in files_of(path))


def ensure_dataset(ds: Dataset, params: dict, folder: str, log) -> tuple[str, dict]:
    """The data set's file (or folder) and expected tally, built unless a matching one exists."""
    path = os.path.join(folder, ds.name if ds.folder else f"{ds.name}.tfrecord")
    meta_path = os.path.join(folder, f"{ds.name}.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        if (meta["version"] == DATA_VERSION and meta["params"] == params
                and disk_bytes(path) == meta["file_bytes"]):
            log(f"data set {ds.name}: reusing {path}")
            return path, meta["expected"]
    except (OSError, ValueError, KeyError):
        pass
    log(f"data set {ds.name}: writing {path} ({ds.describe(params)}) ...")
    if os.path.isdir(path):
        import shutil
        shutil.rmtree(path)
    t0 = time.perf_counter()
    expected = ds.build(path, params)
    expected["file_bytes"] = disk_bytes(path)
    meta = {"version": DATA_VERSION, "params": params, "file_bytes": expected["file_bytes"],
            "expected": expected}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    log(f"data set {ds.name}: written in {time.perf_counter() - t0:.1f} s")
    return path, expected


def warm_page_cache(path: str) -> float:
    """Read the file (or every file in the folder) once; returns the time it took."""
    t0 = time.perf_counter()
    buf = bytearray(8 << 20)
    for name in files_of(path):
        with open(name, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return time.perf_counter() - t0


def worker_env() -> dict:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.pop("PYTHONHASHSEED", None)
    root = os.path.dirname(os.path.dirname(RUN_PY))  # this checkout first, under any interpreter
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def machine_busy() -> float | None:
    """CPU seconds the whole machine has spent busy (all cores, incl. steal), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...
    return (sum(fields[:3]) + sum(fields[5:8])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    """CPU seconds used by this process and its finished children."""
    import resource
    own = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        own += r.ru_utime + r.ru_stime
    return own


def run_subprocess(python: str, name: str, spec: dict, log_path: str, timeout: float) -> dict:
    """Run one row in a fresh process of ``python``; its result dict, or ``{"error": ...}``."""
    cmd = [python, RUN_PY, "--worker", name, "--spec", json.dumps(spec)]
    busy0, own0 = machine_busy(), own_cpu()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=worker_env(), timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as e:
        out, err, rc = e.stdout or "", e.stderr or "", f"timeout after {timeout:.0f} s"
    else:
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    out = out.decode(errors="replace") if isinstance(out, bytes) else out
    err = err.decode(errors="replace") if isinstance(err, bytes) else err
    with open(log_path, "w") as f:
        f.write(f"$ {shlex.join(cmd)}\n--- stdout\n{out}\n--- stderr\n{err}\n--- exit {rc}\n")
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK):])
            result["process_s"] = time.perf_counter() - t0
            busy1 = machine_busy()
            if busy0 is not None and busy1 is not None:
                # Busy time of the machine not spent by us: other processes (or steal).
                result["other_cores"] = max(0.0, (busy1 - busy0) - (own_cpu() - own0)) / result["process_s"]
            return result
    tail = "\n".join(err.strip().splitlines()[-5:])
    return {"error": f"exit {rc}: {tail}"}


def pool_rounds(rows: list[dict]) -> dict:
    """One row from the rounds of the same (case, implementation): every timed
    pass pooled; a failure (or skip) in any round is the row's result."""
    if len(rows) == 1 or "error" in rows[0] or "skipped" in rows[0]:
        return rows[0]
    failed = next((r for r in rows if "error" in r), None)
    if failed is not None:
        return failed
    row = dict(rows[0])
    walls = [w for r in rows for w in r["walls"]]
    cpus = [c for r in rows for c in r["cpus"]]
    median = statistics.median(walls)
    mid = min(range(len(walls)), key=lambda i: abs(walls[i] - median))
    row.update(walls=walls, cpus=cpus, cpu_util=cpus[mid] / walls[mid], repeats=len(walls),
               throughput=row["amount"] / median, best=row["amount"] / min(walls),
               rounds=[r["throughput"] for r in rows],
               other_cores=max((r.get("other_cores") or 0) for r in rows))
    return row


@dataclass
class Plan:
    """What every row of one run shares."""
    files: dict[str, tuple[str, dict]]  # data set -> (path, expected tally)
    size: str  # "full", "quick" or "tiny"
    corrupt: str
    scratch: str
    log_dir: str
    repeats: int | None
    timeout: float
    log: Callable[[str], None]
    datasets: dict[str, Dataset]


def run_row(c: Case, impl: Impl, plan: Plan) -> dict:
    """Run one contender once (in its own process) and turn its passes into a row."""
    quick = plan.size != "full"
    repeats = 1 if c.measure else plan.repeats or (c.quick_repeats if quick else c.repeats)
    path, expected = plan.files[c.dataset]
    row = {"case": c.name, "impl": impl.name, "unit": c.unit, "note": impl.note,
           "ref": None if c.measure else c.ref_of(impl.name), "repeats": repeats}
    name = f"{c.name}/{impl.name}"
    python, why = interpreter(impl, sys.executable)
    if python is None:
        plan.log(f"{name}: {why}")
        return {**row, "skipped": why}
    spec = {"path": os.path.abspath(path), "corrupt": os.path.abspath(plan.corrupt),
            "expected": expected, "repeats": repeats, "quick": quick, "size": plan.size,
            "params": plan.datasets[c.dataset].params(plan.size), "scratch": os.path.abspath(plan.scratch)}
    plan.log(f"{name}: running ({'one measurement' if c.measure else f'{repeats} timed passes'}) ...")
    log_path = os.path.join(plan.log_dir, name.replace("/", "__").replace(" ", "_").replace(":", "")
                            .replace("=", "").replace(",", "") + ".log")
    r = run_subprocess(python, name, spec, log_path, plan.timeout)
    row.update(r)
    if python != sys.executable:
        row["python"] = python
    if "error" in r:
        plan.log(f"{name}: FAILED {r['error']}")
        return row
    if c.measure:
        row["throughput"], row["best"] = r["value"], None
    else:
        kind = UNITS[c.unit][0]
        amount = {"bytes": expected.get("bytes", 0) / 1e9,
                  "bytes_mb": expected.get("bytes", 0) / 1e6}.get(kind, expected["records"])
        row["amount"] = amount
        row["throughput"] = amount / statistics.median(r["walls"])
        row["best"] = amount / min(r["walls"])
    from benchmarks.harness.report import fmt_throughput

    plan.log(f"{name}: {fmt_throughput(row['throughput'], c.unit)} {c.unit} "
             f"(process {r['process_s']:.1f} s)")
    return row


def run_all(selected: list[tuple[Case, Impl]], plan: Plan, *, rounds: int, jobs: int) -> list[dict]:
    """Every selected row: ``jobs`` at a time, or one at a time in ``rounds`` round-robin
    rounds whose passes are pooled; then each row's ratio to its reference row."""
    if jobs > 1:  # rows side by side: a smoke test's speed, not a measurement
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(jobs) as pool:
            results = list(pool.map(lambda ci: run_row(*ci, plan), selected))
    else:
        done = [[run_row(c, impl, plan) for c, impl in selected if k == 0 or not c.measure]
                for k in range(max(rounds, 1))]
        results = [pool_rounds([r for rows in done for r in rows
                                if (r["case"], r["impl"]) == (first["case"], first["impl"])])
                   for first in done[0]]
    ok = {(r["case"], r["impl"]): r for r in results if "error" not in r and "skipped" not in r}
    for r in results:
        ref = ok.get((r["case"], r["ref"]))
        if not CASES[r["case"]].measure and ref and (r["case"], r["impl"]) in ok:
            r["ours_is"] = ref["throughput"] / r["throughput"]
    for c in dict.fromkeys(c for c, _ in selected):
        for impl_name, other in c.time_ratios.items():
            r, o = ok.get((c.name, impl_name)), ok.get((c.name, other))
            if r and o:
                r["detail"] = f"takes {o['throughput'] / r['throughput']:.2f}x the time of {other}"
    return results
