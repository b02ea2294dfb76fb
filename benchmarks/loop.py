#!/usr/bin/env python
"""Images under a training loop: how long each spelling makes the loop wait.

    .venv/bin/python benchmarks/loop.py [--quick] [--out DIR] [--rounds N] [--only NAME,...]

A loader timed alone says how fast it can go; a training loop asks something
else: while the accelerator computes a step, the loader must make the next
batch, and whatever it leaves for ``next()`` stalls the step. Each path here
runs a simulated training loop over case A (the ``images_jpeg`` data set of
``benchmarks/run.py``: 256x256 JPEGs with a label, batches of 64): per batch,
``next(it)`` (timed: the *wait*), then a step of ``time.sleep(S)`` (GIL-free,
standing for accelerator compute) and G = 2 ms of GIL-holding Python
(standing for the framework), for S in 5, 10, 20, 40, 80 ms.

Paths: batch mode (``TFRecordDataset(path, features=presets.tfds(), batch_size=64)``
through ``DataLoader(batch_size=None)``) with 0 and 2 workers, each also with
``Batching(prefetch=0)``; the per-sample spelling ``DataLoader(ds, batch_size=64,
num_workers=2)``; and tf.data (``map(parse + decode_jpeg, AUTOTUNE).batch(64)
.prefetch(AUTOTUNE)``, each batch turned into torch tensors), each in a fresh
process per round, interleaved over ``--rounds`` rounds (the S order reversed
every other round). The first 3 batches of each epoch (worker start-up) are
not counted.

Reported per (path, S), medians over rounds: images/s over the loop, the
wait per batch, the stall (wait / step time), and per path the largest step
rate of the S grid it sustains at <= 5% stall. Prints a Markdown table and
writes DIR/loop.md and DIR/loop.json (DIR: bench-output).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BATCH = 64
G_MS = 2.0
STEPS_MS = (5, 10, 20, 40, 80)
WARM = 3  # batches not counted at the start of each epoch
STALL = 0.05

PATHS = {
    "batch mode, workers=0": {"kind": "batch", "workers": 0, "prefetch": 2},
    "batch mode, workers=0, prefetch=0": {"kind": "batch", "workers": 0, "prefetch": 0},
    "batch mode, workers=2": {"kind": "batch", "workers": 2, "prefetch": 2},
    "batch mode, workers=2, prefetch=0": {"kind": "batch", "workers": 2, "prefetch": 0},
    "per sample, workers=2": {"kind": "sample", "workers": 2},
    "tf.data": {"kind": "tf"},
}


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

    from tfrecord_torch import Batching, TFRecordDataset, presets

    if kind == "batch":
        ds = TFRecordDataset(path, features=presets.tfds(), batch_size=BATCH,
                             batching=Batching(prefetch=spec["prefetch"]))
        return lambda: torch.utils.data.DataLoader(ds, batch_size=None, num_workers=spec["workers"])
    ds = TFRecordDataset(path, features=presets.tfds())
    return lambda: torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=spec["workers"])


def _step(sleep_s: float, python_s: float) -> None:
    time.sleep(sleep_s)  # the accelerator's compute: the GIL is free
    end = time.perf_counter() + python_s
    while time.perf_counter() < end:  # the framework's Python: the GIL is held
        pass


def child(name: str, path: str, steps_ms: list[float]) -> dict:
    """One path's loop at each S of ``steps_ms``, one epoch each."""
    epoch = _loader(path, PATHS[name])
    out = {}
    for s_ms in steps_ms:
        it = iter(epoch())
        waits, steps, images = [], [], 0
        k = 0
        t_start = None
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            _step(s_ms / 1e3, G_MS / 1e3)
            t2 = time.perf_counter()
            k += 1
            if k == WARM:
                t_start = t2
            elif k > WARM:
                waits.append(t1 - t0)
                steps.append(t2 - t1)
                images += len(batch["label"])
            del batch
        del it
        wall = (t_start and time.perf_counter() - t_start) or float("nan")
        wait, step = sum(waits), sum(steps)
        out[str(s_ms)] = {"batches": len(waits), "images_per_s": images / wall,
                          "wait_ms": 1e3 * wait / max(len(waits), 1),
                          "wait_p90_ms": 1e3 * sorted(waits)[int(0.9 * (len(waits) - 1))] if waits else 0.0,
                          "stall": wait / step if step else float("nan")}
    return out


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
    parser.add_argument("--quick", action="store_true", help="a smoke test: 512 records, S in 5 and 20 ms, one round")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-output"))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--only", default="", help="comma-separated path names (see PATHS)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--steps", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = child(args.child, args.data, [float(s) for s in args.steps.split(",")])
        print("@@LOOP@@ " + json.dumps(result))
        return
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    os.makedirs(args.out, exist_ok=True)
    path = _dataset(args.out, args.quick, log)
    names = [n for n in PATHS if not args.only or n in args.only.split(",")]
    unknown = set(filter(None, args.only.split(","))) - set(PATHS)
    if unknown:
        raise SystemExit(f"--only: unknown paths {sorted(unknown)}; choose from {list(PATHS)}")
    steps = [5, 20] if args.quick else list(STEPS_MS)
    rounds = args.rounds or (1 if args.quick else 3)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    load = os.getloadavg()
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(rounds):
        order = steps if r % 2 == 0 else steps[::-1]
        for name in (names if r % 2 == 0 else names[::-1]):
            log(f"round {r + 1}/{rounds}: {name} ...")
            cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--data", path,
                   "--steps", ",".join(map(str, order))]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=1800)
            line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("@@LOOP@@ ")), None)
            if line is None:
                raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            runs[name].append(json.loads(line[len("@@LOOP@@ "):]))
    table = summarise(runs, steps)
    load_after = os.getloadavg()
    command = f"nice -n 10 .venv/bin/python benchmarks/loop.py{' --quick' if args.quick else ''}"
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
             f"(affinity {len(os.sched_getaffinity(0))}); Python {platform.python_version()}; "
             f"load average before {load[0]:.2f}, after {load_after[0]:.2f}",
             f"Command: `{command}`; {rounds} round(s), medians over rounds; step = sleep(S) + {G_MS:g} ms of "
             f"GIL-holding Python; batches of {BATCH}; stall = wait in next() / step time", "",
             *table]
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "loop.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "loop.json"), "w") as f:
        json.dump({"steps_ms": steps, "g_ms": G_MS, "runs": runs}, f, indent=1)


def summarise(runs: dict[str, list[dict]], steps: list[float]) -> list[str]:
    """The Markdown table: per path and S, medians over rounds; then each path's best sustained rate."""
    head = "| path | " + " | ".join(f"S={s:g} ms: img/s, wait ms, stall" for s in steps) + \
        " | fastest step at <= 5% stall |"
    lines = [head, "|---|" + "---:|" * (len(steps) + 1)]
    for name, rounds in runs.items():
        cells, best = [], "none of the grid"
        for s in steps:
            rows = [r[str(float(s))] for r in rounds]
            ips = statistics.median(r["images_per_s"] for r in rows)
            wait = statistics.median(r["wait_ms"] for r in rows)
            stall = statistics.median(r["stall"] for r in rows)
            cells.append(f"{ips:,.0f}, {wait:.2f}, {100 * stall:.1f}%")
            if stall <= STALL and best == "none of the grid":
                best = f"S={s:g} ms ({1e3 / (s + G_MS):.0f} steps/s)"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {best} |")
    return lines


if __name__ == "__main__":
    main()
