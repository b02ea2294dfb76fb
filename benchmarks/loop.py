#!/usr/bin/env python
"""Images under a training loop: how long each spelling makes the loop wait at 80% of its capacity.

    .venv/bin/python benchmarks/loop.py [--quick] [--out DIR] [--rounds N] [--only NAME,...] [--demand F]

A loader timed alone says how fast it can go; a training loop asks something
else: while the accelerator computes a step, the loader must make the next
batch, and whatever it leaves for ``next()`` stalls the step. A step of fixed
length says little across loaders (a step shorter than a loader's own time
per batch stalls any loader), so the step here is chosen from each loader's
own capacity. Over case A (the ``images_jpeg`` data set of
``benchmarks/run.py``: 256x256 JPEGs with a label, batches of 64), each path,
in one process:

1. measures its *capacity*: the images/s of ``--alone`` epochs iterated with
   no step (the first 3 batches of each epoch, worker start-up, not counted);
2. chooses the step: ``time.sleep(S)`` (GIL-free, standing for accelerator
   compute) then G = 2 ms of GIL-holding Python (standing for the framework),
   with S such that the loop asks for ``--demand`` (0.8) of the capacity:
   ``batch / (S + G) = demand x capacity`` (:func:`step_for`). When G alone
   asks for less than that (S would be negative), the loop is not run: the
   ceiling is the framework's Python, not the loader;
3. runs one epoch of the loop: per batch, ``next(it)`` (timed: the *wait*),
   then the step.

Paths: batch mode (``TFRecordDataset(path, features=presets.tfds(), batch_size=64)``
through ``DataLoader(batch_size=None)``) with 0 and 2 workers, each also with
``Batching(prefetch=0)``; the per-sample spelling ``DataLoader(ds, batch_size=64,
num_workers=N)`` with 0 (the records decoded on the main process's decode
threads) and 2 workers, and with 2 workers each decoding on 2 threads
(``Batching(images=ImageBatching(threads=2))``: a worker with one core to
itself decodes on its own thread by default); both spellings with 2 workers
also with ``persistent_workers=True`` (one DataLoader for every epoch, its
workers forked once, as a training loop keeps them from its second epoch
on; the other rows make a DataLoader per epoch, which forks its workers
each time); a ceiling row, per sample with 0 workers whose decode threads
run at ``SCHED_IDLE`` (the loop's thread then never waits for a core they
hold: what is left of the wait is the rest of the floor, and its capacity
says what that priority costs the decoding; a probe, not an option, run
only when ``--only`` names it); and tf.data (``map(parse + decode_jpeg, AUTOTUNE).batch(64)
.prefetch(AUTOTUNE)``, each batch turned into torch tensors), each in a fresh
process per round, interleaved over ``--rounds`` rounds (the order reversed
every other round).

Reported per path, medians over rounds: the capacity, S, the loop's demand and
its images/s, the wait per batch (10th percentile: what ``next()`` costs when
the batch is ready, the hand-off; median; 90th percentile), the stall (wait /
step time) against the 5% target, the capacity measured again after the loop,
and the loader's CPU time per batch (the process's and its DataLoader
workers', less the step's G) alone and in the loop, and the cores busy (the
CPU time of the loader and the step over the epoch's wall time), alone and in
the loop, and the cores the rest of the machine took during the loop: other
processes' CPU time, and the time the hypervisor gave our cores to other
guests (steal), both from /proc/stat. They say what a miss comes from: a loader that costs more CPU per
batch while the step runs is slowed by it; one keeping every core busy in the
loop shares the cores with the step's own Python, and the cores are the
ceiling; a hand-off near 5% of the step leaves no room for anything else; a
capacity that changed from before to after, or fewer cores busy alone than the
loader uses, says the machine's load changed under the run; a quarter of a
core or more taken by other processes and the hypervisor says the loader
did not have the machine to itself. A path that misses
the target gets these named, with their values, in the table's last column
(:func:`miss`). Prints a Markdown table and writes DIR/loop.md and
DIR/loop.json (DIR: bench-output).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BATCH = 64
G_MS = 2.0
DEMAND = 0.8  # the loop asks for this share of the loader's capacity
WARM = 3  # batches not counted at the start of each epoch
STALL = 0.05  # the target: wait <= 5% of the step time
ALONE_EPOCHS = 2

PATHS = {
    "batch mode, workers=0": {"kind": "batch", "workers": 0, "prefetch": 2},
    "batch mode, workers=0, prefetch=0": {"kind": "batch", "workers": 0, "prefetch": 0},
    "batch mode, workers=2": {"kind": "batch", "workers": 2, "prefetch": 2},
    "batch mode, workers=2, prefetch=0": {"kind": "batch", "workers": 2, "prefetch": 0},
    "batch mode, workers=2, persistent": {"kind": "batch", "workers": 2, "prefetch": 2, "persistent": True},
    "per sample, workers=0": {"kind": "sample", "workers": 0},
    # a ceiling, not a spelling: the decode threads at SCHED_IDLE, so the loop's thread never waits for a core;
    # run only when --only names it (on a loaded machine idle threads starve: its capacity is then a few images/s)
    "per sample, workers=0, decode threads idle (ceiling)": {"kind": "sample", "workers": 0, "idle_decoders": True},
    "per sample, workers=2": {"kind": "sample", "workers": 2},
    "per sample, workers=2, threads=2": {"kind": "sample", "workers": 2, "threads": 2},
    "per sample, workers=2, persistent": {"kind": "sample", "workers": 2, "persistent": True},
    "tf.data": {"kind": "tf"},
}


class Ceiling(ValueError):
    """The step's GIL-holding Python alone asks for less than the demand: no sleep reaches it."""

    def __init__(self, demand: float, batch: int, g_s: float) -> None:
        self.demand, self.limit = demand, batch / g_s
        super().__init__(f"a demand of {demand:,.0f} images/s needs a step under {1e3 * batch / demand:.2f} ms, "
                         f"but its Python alone takes {1e3 * g_s:g} ms: the loop cannot ask for more than "
                         f"{self.limit:,.0f} images/s")


def step_for(rate: float, *, batch: int = BATCH, g_s: float = G_MS / 1e3, demand: float = DEMAND) -> float:
    """The sleep S (seconds) of a step ``sleep(S) + g_s`` that asks for ``demand`` of ``rate``.

    A loop taking ``batch`` images per step of ``S + g_s`` seconds asks for
    ``batch / (S + g_s)`` images/s; this is ``demand * rate`` when
    ``S = batch / (demand * rate) - g_s``.

    Raises:
        ValueError: ``rate`` not positive and finite, or ``demand`` not in (0, 1].
        Ceiling: S would be negative: ``g_s`` alone is longer than the step the demand allows.
    """
    if not (rate > 0 and rate != float("inf")):
        raise ValueError(f"rate must be a positive, finite images/s, got {rate!r}")
    if not 0 < demand <= 1:
        raise ValueError(f"demand must be in (0, 1], got {demand!r}")
    s = batch / (demand * rate) - g_s
    if s < 0:
        raise Ceiling(demand * rate, batch, g_s)
    return s


def paths_to_run(chosen: list[str]) -> list[str]:
    """The paths a run times, in PATHS's order: those ``--only`` named, else
    every one but the ceiling rows (:func:`_idle_decode_threads`)."""
    return [n for n in PATHS if n in chosen or not chosen and not PATHS[n].get("idle_decoders")]


def _loader(path: str, spec: dict):
    """An iterable of batches (dicts with 'image' and 'label' tensors) for one epoch."""
    kind = spec["kind"]
    if kind == "tf":
        import torch  # noqa: I001 - before TensorFlow (the other order crashes here)

        from benchmarks.cases.images import tf_image_batches

        def epoch():
            for b in tf_image_batches(path, BATCH).as_numpy_iterator():
                yield {"image": torch.from_numpy(b["image"]), "label": torch.from_numpy(b["label"])}
        return epoch
    import torch.utils.data
    import torchvision.io  # noqa: F401 - imported once, before DataLoader workers fork

    from tfrecord_torch import Batching, ImageBatching, TFRecordDataset, presets

    if kind == "batch":
        ds = TFRecordDataset(path, features=presets.tfds(), batch_size=BATCH,
                             batching=Batching(prefetch=spec["prefetch"]))
        return _epochs(ds, spec, batch_size=None)
    threads = {"batching": Batching(images=ImageBatching(threads=spec["threads"]))} if "threads" in spec else {}
    ds = TFRecordDataset(path, features=presets.tfds(), **threads)
    if spec.get("idle_decoders"):
        _idle_decode_threads()
    return _epochs(ds, spec, batch_size=BATCH)


def _idle_decode_threads() -> None:
    """The per-sample decode threads of this process run at ``SCHED_IDLE`` (a
    probe of what stalls ``next()``, not something the library does): a
    thread of any other policy, the loop's included, takes their core the
    moment it wakes, instead of waiting up to a slice for one. What this
    row still waits is the rest of the floor; its capacity, what giving the
    loop's thread every core it asks for costs the decoding."""
    from tfrecord_torch.data import decodeahead

    run = decodeahead._Groups.run

    def idle_run(self) -> None:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread (Linux)
        run(self)

    decodeahead._Groups.run = idle_run


def _epochs(ds, spec: dict, *, batch_size: int | None):
    """What gives each epoch's DataLoader: a new one per epoch, or (``persistent``) one for all, made once."""
    import torch.utils.data

    def make():
        return torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=spec["workers"],
                                           persistent_workers=spec.get("persistent", False))
    if spec.get("persistent"):
        kept = make()
        return lambda: kept
    return make


def _step(sleep_s: float, python_s: float) -> float:
    """The step; returns the CPU time its GIL-holding part took (to take off the loader's)."""
    time.sleep(sleep_s)  # the accelerator's compute: the GIL is free
    c0 = time.thread_time()
    end = time.perf_counter() + python_s
    while time.perf_counter() < end:  # the framework's Python: the GIL is held
        pass
    return time.thread_time() - c0


def _machine() -> tuple[float, float] | None:
    """Seconds of CPU the whole machine has spent busy (every process's user,
    system and interrupt time) and stolen (the hypervisor ran other guests
    on our cores), summed over the cores, from /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


def _cpu() -> float:
    """CPU time of this process and its children: those ended and joined
    (DataLoader workers forked for an epoch) and those alive (persistent
    workers, read from /proc). A child joined between two calls moves from
    the live read to the children's usage, so the difference of two calls
    counts it once."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime + _live_children_cpu()


def _live_children_cpu() -> float:
    """CPU time (user + system) of this process's live children, from /proc (0.0 elsewhere)."""
    me, total = os.getpid(), 0
    for pid in _children(me):
        fields = _stat(pid)
        if fields is not None and int(fields[1]) == me:  # not ended meanwhile (then counted once joined)
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[str]:
    """The pids of ``pid``'s children: its main thread's children file where the kernel has one, else
    every process of /proc (the caller keeps those whose parent is ``pid``)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return f.read().split()
    except OSError:
        try:
            return [name for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return []


def _stat(pid: str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (state first, then the parent's pid), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


class Epoch(NamedTuple):
    """One epoch's figures. The rate, waits and stall leave out the first WARM
    batches; the CPU figures count the whole epoch (workers' CPU is known only
    once they are joined)."""

    batches: int
    images: int
    seconds: float
    waits_ms: list[float]
    stall: float
    cpu_ms: float  # the loader's CPU time per batch: process + workers, less the step's Python
    cores: float  # CPU time of everything (loader and step) over the epoch's wall time
    others: float  # cores other processes of the machine kept busy over the epoch (nan: unknown)
    steal: float  # cores the hypervisor took for other guests over the epoch (nan: unknown)

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds


def run_epoch(epoch, sleep_s: float | None) -> Epoch:
    """Iterate one epoch; with ``sleep_s`` (not None) each batch is followed by the step."""
    cpu0, m0, w0 = _cpu(), _machine(), time.perf_counter()
    it = iter(epoch())
    waits, steps, images, k, step_cpu = [], [], 0, 0, 0.0
    t_start = None
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        if sleep_s is not None:
            step_cpu += _step(sleep_s, G_MS / 1e3)
        t2 = time.perf_counter()
        k += 1
        if k == WARM:
            t_start = t2
        elif k > WARM:
            waits.append(t1 - t0)
            steps.append(t2 - t1)
            images += len(batch["label"])
        del batch
    t_end = time.perf_counter()
    del it  # workers forked for the epoch are joined here (persistent ones stay: _cpu reads them live)
    cpu, m1, wall = _cpu() - cpu0, _machine(), time.perf_counter() - w0
    others = steal = float("nan")
    if m0 is not None and m1 is not None:
        others = max(0.0, m1[0] - m0[0] - cpu) / wall  # the ticks' rounding: never below 0
        steal = (m1[1] - m0[1]) / wall
    step = sum(steps)
    return Epoch(len(waits), images, t_end - t_start if t_start is not None else float("nan"),
                 [1e3 * w for w in waits], sum(waits) / step if step else float("nan"),
                 1e3 * (cpu - step_cpu) / max(k, 1), cpu / wall, others, steal)


def child(name: str, path: str, alone_epochs: int, demand: float) -> dict:
    """One path: its capacity alone, one epoch of the loop asking ``demand`` of
    it, then one more epoch alone (the capacity after: a change says the
    machine's load changed under the run)."""
    epoch = _loader(path, PATHS[name])
    alone = [run_epoch(epoch, None) for _ in range(alone_epochs)]
    capacity = sum(e.images for e in alone) / sum(e.seconds for e in alone)
    out = {"capacity": capacity, "alone_cpu_ms": alone[-1].cpu_ms, "alone_cores": alone[-1].cores,
           "alone_batches": sum(e.batches for e in alone)}
    try:
        s = step_for(capacity, demand=demand)
    except Ceiling as e:
        return {**out, "ceiling": str(e)}
    loop = run_epoch(epoch, s)
    after = run_epoch(epoch, None)
    waits = sorted(loop.waits_ms)
    return {**out, "s_ms": 1e3 * s, "demand": demand * capacity, "batches": loop.batches,
            "images_per_s": loop.images_per_s, "wait_ms": statistics.fmean(waits),
            "wait_p10_ms": _quantile(waits, 0.1), "wait_p50_ms": _quantile(waits, 0.5), "wait_p90_ms": _quantile(waits, 0.9),
            "wait_max_ms": waits[-1], "stall": loop.stall, "loop_cpu_ms": loop.cpu_ms,
            "loop_cores": loop.cores, "loop_others": loop.others, "loop_steal": loop.steal,
            "capacity_after": after.images_per_s}


def only(spec: str) -> list[str]:
    """The path names of ``--only`` (see :func:`~benchmarks.harness.registry.names_in`).

    Raises:
        ValueError: parts that no path's name begins.
    """
    from benchmarks.harness.registry import names_in

    return names_in(spec, PATHS)


def _quantile(xs: list[float], q: float) -> float:
    return xs[int(q * (len(xs) - 1))] if xs else 0.0


def _dataset(out: str, quick: bool, log) -> str:
    from benchmarks.harness.registry import DATASETS, load_cases
    from benchmarks.harness.runner import ensure_dataset, warm_page_cache

    load_cases()
    ds = DATASETS["images_jpeg"]
    params = dict(ds.full) if not quick else {**ds.quick, "records": 8 * BATCH}
    folder = os.path.join(out, "data")
    os.makedirs(folder, exist_ok=True)
    path, _ = ensure_dataset(ds, params, folder, log)
    warm_page_cache(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: 512 records, one epoch alone, one round")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-output"))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--only", default="", help="comma-separated path names (see PATHS; a name's own commas are "
                        "part of it: --only 'per sample, workers=0,tf.data')")
    parser.add_argument("--demand", type=float, default=DEMAND, help="the share of each path's capacity the loop asks for")
    parser.add_argument("--alone", type=int, default=None, help=f"epochs timed alone (default {ALONE_EPOCHS}; 1 with --quick)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    alone = args.alone or (1 if args.quick else ALONE_EPOCHS)
    if args.child:
        result = child(args.child, args.data, alone, args.demand)
        print("@@LOOP@@ " + json.dumps(result))
        return
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:  # the demand's check, before the data set is built
        step_for(1.0, demand=args.demand)
    except ValueError as e:
        parser.error(f"--demand: {e}")
    os.makedirs(args.out, exist_ok=True)
    try:
        chosen = only(args.only)
    except ValueError as e:
        raise SystemExit(f"--only: {e}; choose from {list(PATHS)}") from None
    names = paths_to_run(chosen)
    path = _dataset(args.out, args.quick, log)
    rounds = args.rounds or (1 if args.quick else 3)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    load = os.getloadavg()
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            log(f"round {r + 1}/{rounds}: {name} ...")
            cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--data", path,
                   "--alone", str(alone), "--demand", repr(args.demand)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=1800)
            line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("@@LOOP@@ ")), None)
            if line is None:
                raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            runs[name].append(json.loads(line[len("@@LOOP@@ "):]))
    load_after = os.getloadavg()
    flags = "".join(f for f, on in ((" --quick", args.quick), (f" --demand {args.demand:g}", args.demand != DEMAND)) if on)
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
             f"(affinity {len(os.sched_getaffinity(0))}); Python {platform.python_version()}; "
             f"load average before {load[0]:.2f}, after {load_after[0]:.2f}",
             f"Command: `nice -n 10 .venv/bin/python benchmarks/loop.py{flags}`; {rounds} round(s), medians over "
             f"rounds; capacity = images/s with no step over {alone} epoch(s); step = sleep(S) + {G_MS:g} ms of "
             f"GIL-holding Python, S chosen so the loop asks for {100 * args.demand:g}% of the capacity; batches of "
             f"{BATCH}; stall = wait in next() / step time; CPU = the loader's CPU time per batch "
             f"(process and workers, less the step's Python)", "",
             *summarise(runs)]
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "loop.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "loop.json"), "w") as f:
        json.dump({"demand": args.demand, "g_ms": G_MS, "batch": BATCH, "alone_epochs": alone, "runs": runs},
                  f, indent=1)


MEASURES = ("capacity", "capacity_after", "s_ms", "wait_p10_ms", "wait_p90_ms", "alone_cpu_ms", "loop_cpu_ms",
            "alone_cores", "loop_cores", "loop_others", "loop_steal")
SHARED = 0.25  # cores taken by other processes and the hypervisor that a miss is named with


def miss(row: dict, cores: int) -> str:
    """What a loop that missed the target comes with, from its own figures (``MEASURES``)."""
    step = row["s_ms"] + G_MS
    found = []
    if row["wait_p10_ms"] >= STALL / 2 * step:
        found.append(f"a floor: even the 10th percentile waits {row['wait_p10_ms']:.2f} ms, "
                     f"{100 * row['wait_p10_ms'] / step:.1f}% of the step")
    if row["loop_cores"] >= 0.9 * cores:
        found.append(f"the cores: {row['loop_cores']:.2f} of {cores} busy in the loop")
    if row["loop_cpu_ms"] >= 1.1 * row["alone_cpu_ms"]:
        found.append(f"dearer work: {100 * (row['loop_cpu_ms'] / row['alone_cpu_ms'] - 1):.0f}% more CPU per batch "
                     "in the loop")
    if abs(row["capacity_after"] / row["capacity"] - 1) > 0.2:
        found.append(f"a changing machine: the capacity went from {row['capacity']:,.0f} to "
                     f"{row['capacity_after']:,.0f} images/s over the run")
    if row["alone_cores"] < 0.6 * cores:
        found.append(f"only {row['alone_cores']:.2f} of {cores} cores busy alone")
    others, steal = row.get("loop_others", math.nan), row.get("loop_steal", math.nan)
    if others + steal >= SHARED:  # nan (unknown) compares false
        found.append(f"a shared machine: other processes kept {others:.2f} cores busy in the loop and the "
                     f"hypervisor took {steal:.2f} (steal)")
    return "; ".join(found) or f"bursts: the 90th percentile waits {row['wait_p90_ms']:.2f} ms"


def summarise(runs: dict[str, list[dict]], cores: int | None = None) -> list[str]:
    """The Markdown table: per path, medians over rounds, the stall against the target and, for
    a miss, what it comes with (:func:`miss`; ``cores``: the machine's, by default this one's)."""
    cores = cores or len(os.sched_getaffinity(0))
    head = ("| path | capacity img/s | S ms | demand img/s | loop img/s | wait ms: p10, p50, p90 | stall | "
            f"<= {100 * STALL:g}% | capacity after | CPU ms/batch: alone, loop | cores busy: alone, loop | "
            "cores taken in the loop: others, steal | what the miss comes with |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for name, rounds in runs.items():
        capacity = statistics.median(r["capacity"] for r in rounds)
        ran = [r for r in rounds if "ceiling" not in r]
        if not ran:  # every round: G alone is longer than the step the demand allows
            lines.append(f"| {name} | {capacity:,.0f} | - | - | - | - | - | not met | - | - | - | - | "
                         f"{rounds[0]['ceiling']} |")
            continue

        def med(key: str) -> float:
            return statistics.median(r.get(key, math.nan) for r in ran)

        stall = med("stall")
        verdict = "met" if stall <= STALL else "not met"
        if len(ran) < len(rounds):
            verdict += f" ({len(rounds) - len(ran)} round(s) at the G ceiling)"
        lines.append(f"| {name} | {capacity:,.0f} | {med('s_ms'):.1f} | {med('demand'):,.0f} | "
                     f"{med('images_per_s'):,.0f} | {med('wait_p10_ms'):.2f}, {med('wait_p50_ms'):.2f}, "
                     f"{med('wait_p90_ms'):.2f} | {100 * stall:.1f}% | {verdict} | {med('capacity_after'):,.0f} | "
                     f"{med('alone_cpu_ms'):.1f}, {med('loop_cpu_ms'):.1f} | "
                     f"{med('alone_cores'):.2f}, {med('loop_cores'):.2f} | "
                     f"{med('loop_others'):.2f}, {med('loop_steal'):.2f} | "
                     f"{'' if stall <= STALL else miss({k: med(k) for k in MEASURES}, cores)} |")
    return lines


if __name__ == "__main__":
    main()
