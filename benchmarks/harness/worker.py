"""The worker process: set up one contender, probe it, time its passes.

``run.py --worker CASE/IMPL --spec JSON`` runs :func:`run_worker` in a fresh process (under
the contender's own interpreter if it names one) and prints one result line.
"""

from __future__ import annotations

import gc
import os
import statistics
import time

from benchmarks.harness.registry import CASES, SPEC

RESULT_MARK = "@@BENCH_RESULT@@ "


def check(tally: dict, expected: dict) -> None:
    """Raise unless every value of a pass's tally equals the data set's."""
    for key, value in tally.items():
        if expected.get(key) != value:
            raise AssertionError(f"wrong result: {key} = {value}, expected {expected.get(key)}")


def cpu_total() -> float:
    """CPU seconds of this process (all threads) and its child processes: the
    finished ones (DataLoader workers, cp) and the live ones (a Pool's)."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    try:
        import psutil
    except ImportError:
        return total
    for child in psutil.Process().children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.Error:
            continue
        total += c.user + c.system
    return total


def build_corrupt(path: str) -> None:
    """Ten small Examples; record 4 has one payload bit flipped inside a float
    of 'x', so it still decodes: only a CRC check can notice."""
    import numpy as np

    from tfrecord_torch import RecordWriter, make_example

    xs = np.random.default_rng(1).standard_normal((10, 32), dtype=np.float32)
    with RecordWriter(path) as w:
        offsets = [w.write(make_example({"label": i, "x": xs[i]})) for i in range(10)]
    with open(path, "rb") as f:
        data = bytearray(f.read())
    # Record 4 ends where record 5's header starts: 4 footer bytes, and before
    # them its last float; flip the low bit of that float's low mantissa byte.
    data[offsets[5] - 4 - 4] ^= 0x01
    with open(path, "wb") as f:
        f.write(data)


def probe(make, corrupt: str) -> tuple[str, str | None]:
    """Read the corrupted file; say whether the implementation noticed."""
    try:
        make(corrupt)()
    except Exception as e:  # noqa: BLE001 - any error means it noticed
        return f"CRC probe: corrupt payload detected ({type(e).__name__})", f"{type(e).__name__}: {e}"
    return "CRC probe: corrupt payload NOT detected (read silently)", None


def run_worker(name: str, spec: dict) -> dict:
    """Run one (case, implementation) row. A timed case makes one untimed
    warm-up pass (not with --quick), then ``repeats`` timed ones; a pass whose
    tally has ``seconds`` timed itself (e.g. without the check of its output)
    and that is its time (and ``cpu_seconds`` its CPU time). A measure case
    runs once; run() returns ``value`` (and optionally ``detail``, ``samples``)
    instead of a tally."""
    case_name, impl_name = name.split("/", 1)
    c = CASES[case_name]
    impl = c.impls[impl_name]
    SPEC.update(spec)
    cpu_total()  # imports psutil before any timing
    t0 = time.perf_counter()
    run = impl.make(spec["path"])
    setup = time.perf_counter() - t0
    probed, probe_error = probe(impl.make, spec["corrupt"]) if c.probe else ("", None)
    expected = spec["expected"]
    extra = {}
    if c.measure:
        gc.collect()
        w0, c0 = time.perf_counter(), cpu_total()
        out = run()
        walls, cpus = [time.perf_counter() - w0], [cpu_total() - c0]
        extra = {"value": out["value"], "detail": out.get("detail", ""), "samples": out.get("samples"),
                 "metrics": out.get("metrics", {})}
        mid = 0
    else:
        if not spec.get("quick"):  # --quick is a smoke test: no warm-up pass
            tally = run()
            tally.pop("seconds", None), tally.pop("cpu_seconds", None)
            check(tally, expected)
        walls, cpus = [], []
        for _ in range(spec["repeats"]):
            gc.collect()
            w0, c0 = time.perf_counter(), cpu_total()
            tally = run()
            wall, cpu = time.perf_counter() - w0, cpu_total() - c0
            walls.append(tally.pop("seconds", wall))
            cpus.append(tally.pop("cpu_seconds", cpu))
            check(tally, expected)
        median = statistics.median(walls)
        mid = min(range(len(walls)), key=lambda i: abs(walls[i] - median))
    try:
        import resource
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    except ImportError:  # not on Linux/macOS
        peak_rss_mb = None
    return {"walls": walls, "cpus": cpus, "cpu_util": cpus[mid] / max(walls[mid], 1e-9), "setup_s": setup,
            "probe": probed, "probe_error": probe_error, "peak_rss_mb": peak_rss_mb, **extra}
