"""Smoke test of the benchmark command: ``benchmarks/run.py --quick`` runs to
the end and reports a positive throughput for every case and implementation
(the memory case: a finite RSS growth from positive RSS samples), and draws
its chart.

It checks that the benchmark works, not how fast anything is: there are no
timing thresholds. About 90 s (each of ~30 rows is a fresh process importing
TensorFlow or torch); it runs in CI like every other test.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "benchmarks", "run.py")

# The rows the benchmark promises; the registry may hold more.
REQUIRED = {
    ("framing_1mib", "ours"),
    ("framing_1mib", "tfrecord"),
    ("framing_1mib", "tf.data"),
    ("parse_small", "ours"),
    ("parse_small", "ours_batched"),
    ("parse_small", "tfrecord"),
    ("parse_small", "tfrecord + DataLoader"),
    ("parse_small", "tf.data batch+parse_example"),
    ("parse_small", "tf.data parse_single+batch"),
    ("images", "ours"),
    ("images", "tf.data"),
    ("images", "decode-only limit"),
    ("small_loader", "ours"),
    ("small_loader", "ours num_workers=2"),
    ("small_loader", "tf.data batch+parse_example"),
    ("small_loader", "tfrecord + DataLoader"),
    ("memory", "ours"),
    ("convert", "ours png"),
    ("convert", "tf writer png"),
    ("convert", "ours ImageFolder copy"),
    ("convert", "cp -r"),
}
THROUGHPUT_UNITS = ("GB/s", "records/s", "images/s")


def _registry() -> set[tuple[str, str]]:
    """Every (case, implementation) registered in run.py (importing it loads
    only the standard library)."""
    spec = importlib.util.spec_from_file_location("_bench_run", RUN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return {(c.name, i) for c in module.CASES.values() for i in c.impls}


@pytest.mark.slow
def test_quick_benchmark_reports_every_row(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, RUN, "--quick", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"

    report = json.loads((out / "results.json").read_text())
    rows = {(r["case"], r["impl"]): r for r in report["results"]}
    expected = _registry()
    assert REQUIRED <= expected
    assert set(rows) == expected
    for key, row in rows.items():
        assert "error" not in row, (key, row.get("error"))
        if row["unit"] == "% RSS growth":  # a measured value: may be 0 or negative
            assert math.isfinite(row["throughput"]), key
            samples = row["samples"]
            assert len(samples["total_rss"]) >= 2 and min(samples["total_rss"]) > 0, key
            assert row.get("ours_is") is None, key
            continue
        assert row["throughput"] > 0 and row["best"] > 0, key
        assert row["unit"] in THROUGHPUT_UNITS, key

    targets = report["targets"]
    assert {t["case"] for t in targets} >= {"images", "small_loader", "memory", "convert"}
    assert all(isinstance(t["met"], bool) for t in targets)

    table = (out / "results.md").read_text()
    assert "| case | implementation |" in table
    for case, impl in expected:
        assert f"| {case} | {impl} |" in table
    assert (out / "results.md").read_text() in proc.stdout
    assert "results.png" in table
    png = (out / "results.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
