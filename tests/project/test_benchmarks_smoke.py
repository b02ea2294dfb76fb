"""Smoke tests of the benchmark harness (``benchmarks/run.py``): the registry holds the
rows the benchmark promises; a tiny run of the rows that need neither TensorFlow nor torch
goes end to end (subprocess per row, a contender under another interpreter, a missing
interpreter skipped with a note, the report, targets and chart). The runs are slow tests
(``bash dev.sh test --all``); the registry's check is fast.

They check that the benchmark works, not how fast anything is: there are no timing
thresholds.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    ("images_photo", "ours batch mode (workers=0)"),
    ("images_photo", "tf.data"),
    ("detection", "ours"),
    ("detection", "tf.data"),
    ("images_1024", "ours"),
    ("images_1024", "ours batch mode"),
    ("images_1024", "tf.data"),
    ("small_loader", "ours"),
    ("small_loader", "ours num_workers=2"),
    ("small_loader", "tf.data batch+parse_example"),
    ("small_loader", "tfrecord + DataLoader"),
    ("arrays_loader", "ours batch mode"),
    ("arrays_loader", "ours batch mode, 2 workers"),
    ("arrays_loader", "ours per sample, 2 workers"),
    ("arrays_loader", "tf.data batch+parse_example+decode_raw"),
    ("yt8m_padded", "ours"),
    ("yt8m_padded", "ours torch threads=1"),
    ("yt8m_padded", "tf.data padded_batch"),
    ("t5_pack", "ours"),
    ("t5_pack", "tf.data seqio pack"),
    ("memory", "ours"),
    ("convert", "ours png"),
    ("convert", "tf writer png"),
    ("convert", "ours ImageFolder copy"),
    ("convert", "cp -r"),
    ("convert_scale", "serial"),
    ("convert_scale", "2 processes"),
    ("convert_scale", "dask 2 workers"),
    ("remote_open", "ours, index files"),
}
# The image cases with FFCV and litdata rows, each under its own venv (benchmarks/venvs/ffcv, .../litdata).
PEER_CASES = ["images", "images_crop", "images_photo", "images_500", "images_1024"]
PEER_VENVS = {"FFCV": "ffcv", "litdata": "litdata"}
THROUGHPUT_UNITS = ("GB/s", "MB/s", "records/s", "images/s")
# Rows that import neither TensorFlow nor torch: a fresh process each costs well under a second.
LIGHT = ["framing_1mib/ours", "framing_1mib/baseline: readinto", "parse_small/ours",
         "parse_small/ours_batched", "convert/cp -r"]

# A case module added from outside: the same contender three ways (this interpreter, another
# interpreter named as a venv, and a venv that does not exist).
EXTRA = '''
from benchmarks.cases.small import parse_ours
from benchmarks.harness.registry import case, target, worker

case("harness_check", dataset="examples_small", unit="records/s", repeats=1, quick_repeats=1,
     title="the harness itself")
worker("harness_check", "ours", note="parse_ours")(parse_ours)
worker("harness_check", "ours in venv alt", note="parse_ours under venv 'alt'", python="alt")(parse_ours)
worker("harness_check", "ours in venv gone", note="parse_ours under a missing venv", python="gone")(parse_ours)
target("harness_check", "ours in venv alt >= 0.001x ours", "ours in venv alt", "ours", at_least=0.001)
'''


def _registry() -> set[tuple[str, str]]:
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.harness import registry

        registry.load_cases()
        return {(c.name, i) for c in registry.CASES.values() for i in c.impls}
    finally:
        sys.path.remove(ROOT)


def _without_venv() -> set[tuple[str, str]]:
    """Rows whose own interpreter (a venv under benchmarks/venvs) is not installed here."""
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.harness import registry

        registry.load_cases()
        return {(c.name, i.name) for c in registry.CASES.values() for i in c.impls.values()
                if i.python and registry.interpreter(i, sys.executable)[0] is None}
    finally:
        sys.path.remove(ROOT)


def _run(out, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, RUN, "--tiny", "--out", str(out), *args], cwd=ROOT, check=False,
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def _check_report(out, proc, expected: set[tuple[str, str]], skipped=frozenset()) -> dict:
    report = json.loads((out / "results.json").read_text())
    rows = {(r["case"], r["impl"]): r for r in report["results"]}
    assert set(rows) == expected
    for key, row in rows.items():
        assert "error" not in row, (key, row.get("error"))
        if key in skipped:
            assert "missing" in row["skipped"], key
            continue
        if row["unit"] == "% RSS growth":  # a measured value: may be 0 or negative
            assert math.isfinite(row["throughput"]), key
            assert len(row["samples"]["total_rss"]) >= 2 and min(row["samples"]["total_rss"]) > 0, key
            assert row.get("ours_is") is None, key
            continue
        if row["unit"] == "s":  # a measured time, with the requests it made
            assert row["throughput"] > 0 and row["metrics"]["requests_per_shard"] > 0, key
            assert row.get("ours_is") is None, key
            continue
        assert row["throughput"] > 0 and row["best"] > 0, key
        assert row["unit"] in THROUGHPUT_UNITS, key
    assert all(isinstance(t["met"], bool) for t in report["targets"])
    table = (out / "results.md").read_text()
    assert "| case | implementation |" in table
    for case, impl in expected:
        assert f"| {case} | {impl} |" in table
    assert table in proc.stdout
    assert "results.png" in table
    png = (out / "results.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    return report


def test_registry_holds_the_promised_rows():
    assert REQUIRED <= _registry()


def _peer_rows() -> dict[tuple[str, str], object]:
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.harness import registry

        registry.load_cases()
        return {(case, peer): registry.CASES[case].impls.get(peer) for case in PEER_CASES for peer in PEER_VENVS}
    finally:
        sys.path.remove(ROOT)


def test_the_image_cases_have_ffcv_and_litdata_rows_in_their_own_venvs():
    """Each promised image case has an FFCV and a litdata row, each run by its peer's venv and
    beside tf.data and ours batch mode, with targets of ours (batch mode, with and without
    workers) against each."""
    rows = _peer_rows()
    assert all(rows.values()), [key for key, impl in rows.items() if impl is None]
    for (case, peer), impl in rows.items():
        assert impl.python == PEER_VENVS[peer] and not impl.yardstick, (case, peer)
        assert {(case, "tf.data"), (case, "ours batch mode"), (case, "ours batch mode (workers=0)")} <= _registry()
    targets = _case_targets()
    for case in PEER_CASES:
        assert {f"{ours} >= 1.0x {peer}" for peer in PEER_VENVS
                for ours in ("ours batch mode", "ours batch mode (workers=0)")} <= targets[case], case


def test_a_peer_row_without_its_venv_is_skipped_with_a_note(tmp_path, monkeypatch):
    """Where benchmarks/venvs/ffcv or .../litdata is not installed (as in CI), the row is skipped
    with the note naming the missing interpreter, and no process is started."""
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.harness import registry, runner

        registry.load_cases()
        monkeypatch.setattr(registry, "VENVS", str(tmp_path))
        monkeypatch.setattr(runner, "run_subprocess", lambda *a, **k: pytest.fail("a process was started"))
        logged: list[str] = []
        for case in PEER_CASES:
            c = registry.CASES[case]
            plan = runner.Plan(files={c.dataset: ("unused.tfrecord", {"records": 1})}, size="tiny",
                               corrupt="unused", scratch=str(tmp_path), log_dir=str(tmp_path), repeats=None,
                               timeout=1, log=logged.append, datasets=registry.DATASETS)
            for peer, venv in PEER_VENVS.items():
                row = runner.run_row(c, c.impls[peer], plan)
                missing = os.path.join(str(tmp_path), venv, "bin", "python")
                assert row["skipped"] == (f"skipped: its interpreter {missing} is missing "
                                          "(see benchmarks/venvs/README.md)"), (case, peer)
                assert "throughput" not in row and "error" not in row, (case, peer)
        assert len(logged) == len(PEER_CASES) * len(PEER_VENVS)
    finally:
        sys.path.remove(ROOT)


@pytest.mark.slow  # a subprocess per row: about 9 s of CPU
def test_tiny_run_of_the_light_rows_with_other_interpreters(tmp_path):
    (tmp_path / "bench_extra.py").write_text(EXTRA)
    alt = tmp_path / "venvs" / "alt" / "bin" / "python"
    alt.parent.mkdir(parents=True)
    alt.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    alt.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "TFRECORD_BENCH_EXTRA_CASES": "bench_extra", "TFRECORD_BENCH_VENVS": str(tmp_path / "venvs")}
    out = tmp_path / "bench"
    proc = _run(out, "--only", ",".join(LIGHT + ["harness_check"]), env=env)
    expected = {tuple(name.split("/", 1)) for name in LIGHT}
    expected |= {("harness_check", "ours"), ("harness_check", "ours in venv alt"),
                 ("harness_check", "ours in venv gone")}
    report = _check_report(out, proc, expected, skipped={("harness_check", "ours in venv gone")})
    rows = {(r["case"], r["impl"]): r for r in report["results"]}
    assert rows[("harness_check", "ours in venv alt")]["python"] == str(alt)
    assert "CorruptRecordError" in rows[("harness_check", "ours in venv alt")]["probe"]
    table = (out / "results.md").read_text()
    assert f"run by {alt}" in table
    assert "| harness_check | ours in venv gone | skipped |" in table
    assert {t["target"] for t in report["targets"]} >= {"ours in venv alt >= 0.001x ours"}
    listing = subprocess.run([sys.executable, RUN, "--list"], capture_output=True, text=True, env=env,
                             check=True).stdout
    assert "harness_check/ours in venv gone: parse_ours under a missing venv [python: gone]" in listing


def _case_names() -> list[str]:
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.harness import registry

        registry.load_cases()
        return sorted(registry.CASES)
    finally:
        sys.path.remove(ROOT)


def _case_targets() -> dict[str, set[str]]:
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.harness import registry

        registry.load_cases()
        return {c: {t.text for t in registry.TARGETS if t.case == c} for c in registry.CASES}
    finally:
        sys.path.remove(ROOT)


# One run per case, so the runs spread over the test processes and each has its own
# time limit (all rows in one run took over 600 s on a loaded CI machine).
@pytest.mark.slow
@pytest.mark.parametrize("case", _case_names())
def test_tiny_run_of_every_row(tmp_path, case):
    out = tmp_path / "bench"
    proc = _run(out, "--only", case)
    rows = {row for row in _registry() if row[0] == case}
    skipped = _without_venv() & rows
    report = _check_report(out, proc, rows, skipped=skipped)
    got, want = {t["target"] for t in report["targets"]}, _case_targets()[case]
    assert got <= want and (got or not want or skipped), (got, want)


def test_the_per_case_runs_cover_the_promised_cases():
    assert {case for case, _ in REQUIRED} <= set(_case_names())


def _loop_module():
    sys.path.insert(0, ROOT)
    try:
        from benchmarks import loop
    finally:
        sys.path.remove(ROOT)
    return loop


def test_the_loop_step_asks_for_its_share_of_the_capacity():
    """benchmarks/loop.py: the sleep S makes a step of S + G that takes ``batch`` images at
    ``demand`` x the loader's rate."""
    loop = _loop_module()
    s = loop.step_for(6400.0, batch=64, g_s=0.002, demand=0.8)
    assert s == pytest.approx(0.0105)
    assert 64 / (s + 0.002) == pytest.approx(0.8 * 6400.0)
    assert loop.step_for(1000.0) == pytest.approx(loop.BATCH / (loop.DEMAND * 1000.0) - loop.G_MS / 1e3)
    assert loop.step_for(32000.0, batch=64, g_s=0.002, demand=1.0) == 0.0  # G alone is the step: no sleep


def test_the_loops_only_takes_names_that_hold_commas():
    """``--only`` splits on commas, which the path names hold too: each name is taken whole."""
    loop = _loop_module()
    assert loop.only("per sample, workers=0,tf.data") == ["per sample, workers=0", "tf.data"]
    assert loop.only("batch mode, workers=0, prefetch=0,batch mode, workers=0") == \
        ["batch mode, workers=0, prefetch=0", "batch mode, workers=0"]
    assert loop.only("") == []
    with pytest.raises(ValueError, match="'per sample, nope, tf.data'"):
        loop.only("per sample, nope,tf.data")


def test_the_loops_ceiling_row_runs_only_when_named():
    """The row with idle decode threads starves on a loaded machine: a run of every path leaves it out."""
    loop = _loop_module()
    ceiling = "per sample, workers=0, decode threads idle (ceiling)"
    assert ceiling in loop.PATHS and ceiling not in loop.paths_to_run([])
    assert "per sample, workers=0" in loop.paths_to_run([])
    assert loop.paths_to_run(loop.only(f"per sample, workers=0,{ceiling}")) == ["per sample, workers=0", ceiling]


def test_the_benchmarks_only_takes_row_names_that_hold_commas_and_refuses_a_typo(tmp_path):
    """``run.py --only`` takes "images_500/ours, decoder='fast'" whole; a part
    that names nothing is an error naming it, not silently dropped."""
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.harness.registry import names_in
    finally:
        sys.path.remove(ROOT)
    known = ["images", "images_500/ours", "images_500/ours, decoder='fast'", "detection/ours, 2 persistent workers"]
    assert names_in("images_500/ours, decoder='fast',images", known) == ["images_500/ours, decoder='fast'", "images"]
    assert names_in("images_500/ours,detection/ours, 2 persistent workers,", known) == \
        ["images_500/ours", "detection/ours, 2 persistent workers"]
    proc = subprocess.run([sys.executable, RUN, "--tiny", "--out", str(tmp_path), "--only",
                           "images/ours,images/our (workers=0)"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no name begins 'images/our (workers=0)'" in proc.stderr, proc.stderr[-2000:]


def test_the_loop_step_refuses_a_demand_its_python_alone_exceeds():
    """A rate whose demand needs a step shorter than G is the ceiling of G, not a negative sleep."""
    loop = _loop_module()
    with pytest.raises(loop.Ceiling, match=r"Python alone takes 2 ms.*32,000 images/s") as e:
        loop.step_for(50000.0, batch=64, g_s=0.002, demand=0.8)
    assert e.value.limit == pytest.approx(32000.0) and e.value.demand == pytest.approx(40000.0)
    assert isinstance(e.value, ValueError)
    for rate in (0.0, -5.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="rate must be"):
            loop.step_for(rate)
    for demand in (0.0, 1.5, math.nan):
        with pytest.raises(ValueError, match="demand must be"):
            loop.step_for(1000.0, demand=demand)


def test_the_loop_table_marks_the_target_and_the_ceiling():
    """The table gives each path's stall against the 5% target, and a path whose demand G alone
    exceeds its ceiling instead of a stall."""
    loop = _loop_module()
    row = {"capacity": 6000.0, "alone_cpu_ms": 20.0, "alone_cores": 1.9, "alone_batches": 118, "s_ms": 11.3,
           "demand": 4800.0, "batches": 59, "images_per_s": 4700.0, "wait_ms": 0.3, "wait_p50_ms": 0.2,
           "wait_p90_ms": 0.4, "wait_p10_ms": 0.1, "wait_max_ms": 2.0, "stall": 0.02, "loop_cpu_ms": 21.0, "loop_cores": 1.6,
           "loop_others": 0.05, "loop_steal": 0.02, "capacity_after": 6100.0}
    ceiling = {"capacity": 50000.0, "alone_cpu_ms": 1.0, "alone_cores": 1.0, "alone_batches": 118,
               "ceiling": str(loop.Ceiling(40000.0, 64, 0.002))}
    lines = loop.summarise({"fast": [row, {**row, "stall": 0.04}, {**row, "stall": 0.2}],
                            "slow": [{**row, "stall": 0.06}], "G-bound": [ceiling]}, cores=2)
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines[2:]}
    assert cells["fast"][5:7] == ["4.0%", "met"] and cells["fast"][-1] == ""  # the median of the rounds
    assert cells["slow"][5:7] == ["6.0%", "not met"] and cells["slow"][-1] == "bursts: the 90th percentile waits 0.40 ms"
    assert cells["fast"][-2] == "0.05, 0.02"
    assert cells["G-bound"][0] == "50,000" and cells["G-bound"][6] == "not met"
    assert cells["G-bound"][-1].startswith("a demand of 40,000")
    assert all(len(c) == len(cells["fast"]) for c in cells.values())


def test_a_missed_loop_says_what_it_comes_with():
    """Each figure that explains a miss is named with its value: a floor under the wait, the cores,
    dearer work in the loop, a machine whose load changed, a loader short of cores alone, cores
    taken by other processes and the hypervisor."""
    loop = _loop_module()
    row = {"capacity": 6000.0, "capacity_after": 6100.0, "s_ms": 10.0, "wait_p10_ms": 0.1, "wait_p90_ms": 3.0,
           "alone_cpu_ms": 20.0, "loop_cpu_ms": 21.0, "alone_cores": 1.9, "loop_cores": 1.6}
    assert loop.miss(row, 2) == "bursts: the 90th percentile waits 3.00 ms"
    assert loop.miss({**row, "wait_p10_ms": 0.4}, 2) == \
        "a floor: even the 10th percentile waits 0.40 ms, 3.3% of the step"
    assert loop.miss({**row, "loop_cores": 1.85}, 2) == "the cores: 1.85 of 2 busy in the loop"
    assert loop.miss({**row, "loop_cpu_ms": 25.0}, 2) == "dearer work: 25% more CPU per batch in the loop"
    assert loop.miss({**row, "capacity_after": 4000.0}, 2) == \
        "a changing machine: the capacity went from 6,000 to 4,000 images/s over the run"
    assert loop.miss({**row, "alone_cores": 0.5}, 2) == "only 0.50 of 2 cores busy alone"
    assert loop.miss({**row, "alone_cores": 0.5, "loop_cores": 1.9}, 2) == \
        "the cores: 1.90 of 2 busy in the loop; only 0.50 of 2 cores busy alone"
    assert loop.miss({**row, "loop_others": 0.1, "loop_steal": 0.3}, 2) == \
        "a shared machine: other processes kept 0.10 cores busy in the loop and the hypervisor took 0.30 (steal)"
    assert loop.miss({**row, "loop_others": 0.1, "loop_steal": 0.1}, 2) == "bursts: the 90th percentile waits 3.00 ms"
    assert loop.miss({**row, "loop_others": math.nan, "loop_steal": math.nan}, 2) == \
        "bursts: the 90th percentile waits 3.00 ms"  # unknown where /proc/stat is not


@pytest.mark.slow
def test_quick_run_of_the_training_loop_benchmark(tmp_path):
    """benchmarks/loop.py --quick: every path measures its capacity, runs the simulated loop at 80%
    of it and lands in the table."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "loop.py"), "--quick", "--out",
                           str(tmp_path)], cwd=ROOT, check=False, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (tmp_path / "loop.md").read_text()
    assert table in proc.stdout
    report = json.loads((tmp_path / "loop.json").read_text())
    assert report["demand"] == 0.8
    for name in ("batch mode, workers=0", "batch mode, workers=2", "batch mode, workers=2, persistent",
                 "per sample, workers=0", "per sample, workers=2", "per sample, workers=2, persistent", "tf.data"):
        assert f"| {name} |" in table
        (row,) = report["runs"][name]
        assert row["capacity"] > 0 and row["alone_batches"] > 0 and row["alone_cpu_ms"] > 0
        assert row["batches"] > 0 and row["images_per_s"] > 0 and row["wait_ms"] >= 0 and row["s_ms"] >= 0
        assert row["demand"] == pytest.approx(0.8 * row["capacity"])
        assert row["loop_others"] >= 0 and row["loop_steal"] >= 0  # /proc/stat read
    for kind in ("batch mode", "per sample"):  # persistent workers are never joined: their CPU is read live
        (kept,) = report["runs"][f"{kind}, workers=2, persistent"]
        (forked,) = report["runs"][f"{kind}, workers=2"]
        assert kept["alone_cpu_ms"] > 0.5 * forked["alone_cpu_ms"], (kept, forked)


_LIVE_CHILD_CHECK = """
import builtins, subprocess, sys, time
sys.path.insert(0, ROOT)
from benchmarks import loop
if not CHILDREN_FILE:
    def no_children_file(path, *args, **kwargs):
        if str(path).endswith("/children"):
            raise FileNotFoundError(path)
        return builtins.open(path, *args, **kwargs)
    loop.open = no_children_file
before = loop._cpu()
child = subprocess.Popen([sys.executable, "-c", "import time\\nend = time.process_time() + 0.6\\n"
                          "while time.process_time() < end: pass\\ntime.sleep(30)"])
try:
    deadline = time.monotonic() + 20
    while loop._live_children_cpu() < 0.5 and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = loop._cpu() - before
finally:
    child.kill()
    child.wait()
joined = loop._cpu() - before
print(alive, joined)
"""


@pytest.mark.parametrize("children_file", [True, False], ids=["children file", "scan of /proc"])
def test_the_loops_cpu_counts_a_live_child_once_and_a_joined_one_after(children_file):
    """benchmarks/loop.py's _cpu: a persistent worker's CPU is read from /proc while it lives (from
    the kernel's list of children, or where there is none a scan of /proc), and once it is joined
    it is counted by the process's children's usage instead, never twice. Checked in a process of
    its own: the test runner's other children (those of earlier tests) would move its counts."""
    script = f"ROOT = {ROOT!r}\nCHILDREN_FILE = {children_file!r}\n" + _LIVE_CHILD_CHECK
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    alive, joined = (float(x) for x in proc.stdout.split())
    assert alive >= 0.5  # the child's busy 0.6 s, read live
    assert alive - 0.05 <= joined <= alive + 0.5  # moved to the children's usage, not added again


@pytest.mark.slow
def test_quick_run_of_the_bucket_benchmark_with_its_peers(tmp_path):
    """benchmarks/bucket.py --quick: every mode reads through the shaped bucket, with the shard
    cache and with range reads, for images and for small records, and lands in the table; the
    shard cache rows fetch far fewer shard GETs than images; each peer (webdataset, mosaicml
    streaming) runs under its venv beside our same mode, or is listed as skipped when its venv
    is absent."""
    sys.path.insert(0, ROOT)
    try:
        from benchmarks import bucket
    finally:
        sys.path.remove(ROOT)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bucket.py"), "--quick", "--records",
                           "128", "--small-records", "2048", "--latencies", "0.02", "--out", str(tmp_path)],
                          cwd=ROOT, check=False, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (tmp_path / "bucket.md").read_text()
    assert table in proc.stdout
    lines = table.splitlines()

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.split("|")]

    def row(start: str, header: str = "| mode | storage |") -> dict[str, str]:
        """The first row beginning ``start``, by the column names of the first table whose header begins ``header``."""
        names = cells(next(x for x in lines if x.startswith(header)))
        return dict(zip(names, cells(next(x for x in lines if x.startswith(start)))))

    for mode in bucket.MODES:
        cached = row(f"| {mode} | bucket, 20 ms, shard cache (default) |")
        # a cold cache's first epoch reads records by range while their shards are copied,
        # so on the quick run's 128 images its GETs per image say little: only the warm
        # epoch's are asserted (none)
        assert float(cached["images/s"].replace(",", "")) > 0, cached
        assert float(cached["bucket CPU (cores)"]) > 0, cached  # moto and the proxy served the copies
        assert float(row(f"| {mode} | bucket, 20 ms, range reads (cache=None) |")["images/s"].replace(",", "")) > 0
        assert row(f"| {mode} | local disk |")["x local after the first batch (best)"] == "1.00"
    warm = row("| shuffle=True | bucket, 20 ms, shard cache, second epoch (warm) |")
    assert float(warm["shard GETs per image"]) == 0, warm  # the second epoch reads the copies only
    for mode in bucket.SMALL_MODES:
        for variant in bucket.VARIANTS.values():
            small = [line for line in lines if line.startswith(f"| {mode} | bucket, 20 ms, {variant} |")]
            assert len(small) == 2, small  # images, then small records
    for peer in bucket.PEERS:
        if bucket.peer_python(peer) is None:
            assert f"| - | {peer} | skipped |" in table
            continue
        for mode in bucket.PEER_MODES:
            got = row(f"| {mode} | {peer} | bucket, 20 ms |", header="| mode | reader | storage |")
            assert float(got["images/s"].replace(",", "")) > 0, got


@pytest.mark.slow
def test_small_run_of_the_first_epoch_benchmark(tmp_path):
    """benchmarks/first_epoch.py on a few small generated shards: both first-batch rows
    fetch a fraction of the shards, and epoch 0 fetches each byte once, epoch 1 (ranges
    by the cached indexes) no second pass to index. Its index cache goes when it ends."""
    import re

    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "first_epoch.py"), "--shards", "40",
                           "--shard-mb", "0.5", "--record-kb", "4", "--buffer", "50", "--batch", "8",
                           "--latency", "0.005", "--epoch-shards", "4"],
                          cwd=ROOT, check=False, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(tmp_path.glob("first-epoch-index-*"))
    fractions = [float(f) for f in re.findall(r"MB of shards fetched \(([\d.]+) of the data\)", proc.stdout)]
    assert len(fractions) == 2 and all(f < 0.25 for f in fractions), proc.stdout
    zero, one = (float(x) for x in re.search(r"epoch 0 fetched ([\d.]+)x the data, epoch 1 .* ([\d.]+)x",
                                             proc.stdout).groups())
    # epoch 1 reads by range requests (no shard cache): some ranges overlap, but no scan of the shards on top
    assert 1.0 <= zero <= 1.05 and one < 1.5, proc.stdout


@pytest.mark.slow
def test_small_run_of_the_startup_benchmark(tmp_path):
    """benchmarks/startup.py on 128 records: each bucket row counts its
    open's listing and index objects at the proxy, and reads every record."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "startup.py"), "--rounds", "1",
                           "--records", "128", "--shards", "8", "--workers", "0", "--orders", "in order",
                           "--kinds", "batch", "--variants", "ranges", "--out", str(tmp_path)],
                          cwd=ROOT, check=False, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 8 | 0 | in order | batch | ranges |")]
    assert len(rows) == 1 and "open: 2 LIST" in rows[0] and "8 GET index" in rows[0], proc.stdout
    ceiling = [line for line in proc.stdout.splitlines() if line.startswith("- 8 shards, 20 ms: open (import")]
    assert len(ceiling) == 1 and "local / this at most" in ceiling[0], proc.stdout


@pytest.mark.slow
def test_small_run_of_the_loop_thread_benchmark(tmp_path):
    """benchmarks/loop_thread.py on 800 small JPEG records: a row per round with
    the CPU per record, per batch, batch mode's CPU and wall per batch and the
    DataLoader's own floor after a step and back to back, each positive."""
    import io

    import numpy as np
    from PIL import Image as PILImage

    from tfrecord_torch import RecordWriter, make_example

    rng = np.random.default_rng(0)
    path = str(tmp_path / "jpegs.tfrecord")
    with RecordWriter(path) as w:
        for i in range(800):
            out = io.BytesIO()
            PILImage.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(out, "JPEG")
            w.write(make_example({"image": out.getvalue(), "label": i}))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "loop_thread.py"), path, "--rounds", "1",
                           "--step", "0.005"], cwd=ROOT, check=False, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 1 |"))
    record, batch, wall, batch_mode, floor = (cell.strip() for cell in row.strip("|").split("|")[1:])
    assert float(record) > 0 and all(float(x) > 0 for x in batch.split(",")) and float(wall) > 0
    assert all(float(x) > 0 for x in floor.split(",")) and len(floor.split(",")) == 2  # after a step, back to back
    assert all(float(x) > 0 for x in batch_mode.split(",")) and len(batch_mode.split(",")) == 3


def test_the_batch_parser_benchmark_prints_both_paths_and_the_rules_pick():
    """benchmarks/parse_batch.py: a cell per length and feature count, the
    faster path named; a value of 64 KiB beside one number parses one by one."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "parse_batch.py"), "--lengths",
                           "1024,65536", "--numeric", "0,32", "--repeats", "2", "--batch", "16"],
                          cwd=ROOT, check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| 1,024 |")
            or line.startswith("| 65,536 |")}
    assert set(rows) == {"1,024", "65,536"}, proc.stdout
    assert rows["65,536"].split("|")[2].count("(one by one)") == 1, rows


@pytest.mark.slow
def test_quick_run_of_the_decoder_cpu_benchmark(tmp_path):
    """benchmarks/decode_cpu.py --quick: each decoder alone and the pipeline,
    a CPU time per image in every row, the decoders' pixels checked equal,
    and the turbojpeg row where the system has that library."""
    import ctypes.util

    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "decode_cpu.py"), "--quick", "--rounds",
                           "2", "--passes", "1", "--out", str(tmp_path)], cwd=ROOT, check=False, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in proc.stdout.splitlines()
            if line.startswith("| decoder alone") or line.startswith("| pipeline")}
    expected = {"decoder alone: ours (libjpeg, one GIL-free call a thread)",
                "decoder alone: simplejpeg (its own libjpeg-turbo)",
                "pipeline: batch mode, num_workers=0 (whole process)",
                "pipeline: batch mode, 2 persistent workers (main process and workers)"}
    if ctypes.util.find_library("turbojpeg"):
        expected.add("decoder alone: tjDecompress2 (libturbojpeg, as FFCV calls it)")
    assert set(rows) == expected, proc.stdout
    for name, (median, rounds, ratio) in rows.items():
        assert float(median) > 0 and len(rounds.split(",")) == 2 and ratio.strip().endswith("x"), (name, median)
    assert "the decoders' pixels equal: True" in proc.stdout
    inside = re.search(r"Inside the decoder's call .*: ([\d.]+) ms with num_workers=0, ([\d.]+) with 2 persistent",
                       proc.stdout)
    assert inside and float(inside[1]) > 0 and float(inside[2]) > 0, proc.stdout  # the workers' time counted too
    assert (tmp_path / "decode_cpu.md").read_text() == proc.stdout.rstrip("\n") + "\n"


def test_the_decoder_cpu_benchmark_raises_a_decode_threads_error(monkeypatch):
    """A decoder failing on one of the timing threads fails the run: no CPU
    time is reported for a share that was never decoded."""
    import numpy as np

    monkeypatch.syspath_prepend(ROOT)
    from benchmarks.decode_cpu import cpu_per_image

    def failing(images, out):
        if len(images) and images[0] == b"bad":
            raise RuntimeError("a decoder failed")

    with pytest.raises(RuntimeError, match="a decoder failed"):
        cpu_per_image(failing, [b"ok", b"ok", b"bad", b"ok"], np.zeros((4, 2, 2, 3), np.uint8), 2)
    assert cpu_per_image(failing, [b"ok"] * 4, np.zeros((4, 2, 2, 3), np.uint8), 2) >= 0
