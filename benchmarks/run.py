#!/usr/bin/env python
"""Benchmarks: tfrecord_torch side by side with tf.data and the ``tfrecord`` package.

Usage::

    .venv/bin/python benchmarks/run.py [--quick] [--out DIR] [--only CASE[/IMPL],...] [--repeats N]

(or ``bash dev.sh bench``). Prints a Markdown table and writes it to
``DIR/results.md`` and ``DIR/results.json`` (DIR defaults to ``bench-output``).

How it measures
---------------
* The data sets are written once with our RecordWriter into ``DIR/data`` and
  reused by later runs while their parameters match (``DIR/data/*.json``).
  The parent process reads each one once before any measurement so it sits in
  the page cache.
* Every (case, implementation) pair runs in a subprocess of its own: this
  script re-invoked as ``run.py --worker CASE/IMPL --spec JSON``. TensorFlow
  and the ``tfrecord`` package cannot share a process (both register
  ``tensorflow.Example`` with protobuf), and a fresh process for ours too means
  none of them inherits another's warm caches or imports. A worker imports only
  what it needs, and only after it starts.
* A worker first reads a small file with one corrupted payload byte (the CRC
  probe, reported in the note column: does the implementation notice?), then
  makes one untimed warm-up pass, then times ``repeats`` full passes. The
  throughput is the median pass; "best" is the fastest. Each pass is checked
  against the data set (record count, payload bytes, a checksum of the decoded
  values), so an implementation cannot win by skipping work.
* "CPU" is process CPU time / wall time of the median pass (all threads): 1.0
  means one core busy; tf.data can use more than one.

Adding a case
-------------
Register a data set with :func:`dataset` (a builder writing the file and
returning its expected tally) and implementations with
``@worker(case, impl, note=...)``. An implementation is a function
``make(path) -> run`` that does its imports and set-up and returns ``run()``,
one full pass over the file returning a tally dict (``records`` and
``checksum``, optionally ``bytes``), each checked against the data set's.
A case's unit is GB/s (the data set's payload bytes) or records/s; its row
named ``ours`` is the reference for the ratios. ``--list`` shows the registry.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # for running from a checkout without installing
    sys.path.append(ROOT)

RESULT_MARK = "@@BENCH_RESULT@@ "
DATA_VERSION = 1  # bump when a builder changes what it writes


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------

@dataclass
class Dataset:
    name: str
    build: Callable[[str, dict], dict]  # (path, params) -> expected tally
    full: dict
    quick: dict
    describe: Callable[[dict], str]
    folder: bool = False  # the builder writes a folder (DIR/data/NAME/), not NAME.tfrecord


@dataclass
class Impl:
    name: str
    make: Callable[[str], Callable[[], dict]]
    note: str


@dataclass(eq=False)  # hashable (by identity)
class Case:
    name: str
    dataset: str
    unit: str  # see UNITS
    repeats: int
    quick_repeats: int
    title: str
    probe: bool = True  # run the CRC probe (needs workers that read the small-Example schema)
    measure: bool = False  # run() returns a measured value, not a timed pass (see run_worker)
    short: str = ""  # title for the chart
    impls: dict[str, Impl] = field(default_factory=dict)


# unit -> (how the amount per pass is counted, format)
UNITS = {
    "GB/s": ("bytes", "{:.2f}"),  # the data set's payload bytes / 1e9
    "records/s": ("records", "{:,.0f}"),
    "images/s": ("records", "{:,.0f}"),
    "% RSS growth": (None, "{:+.1f}"),  # a measured value (Case.measure)
}

DATASETS: dict[str, Dataset] = {}
CASES: dict[str, Case] = {}
SPEC: dict = {}  # in a worker process: its spec (dataset params, quick, ...)


def dataset(name: str, *, full: dict, quick: dict, describe: Callable[[dict], str], folder: bool = False):
    def register(build):
        DATASETS[name] = Dataset(name, build, full, quick, describe, folder)
        return build
    return register


def case(name: str, *, dataset: str, unit: str, repeats: int, quick_repeats: int, title: str,
         probe: bool = True, measure: bool = False, short: str = "") -> None:
    assert unit in UNITS, unit
    CASES[name] = Case(name, dataset, unit, repeats, quick_repeats, title, probe, measure, short or title)


def worker(case_name: str, impl: str, *, note: str):
    """Register ``make(path) -> run`` as implementation ``impl`` of a case."""
    def register(make):
        CASES[case_name].impls[impl] = Impl(impl, make, note)
        return make
    return register


# --------------------------------------------------------------------------
# Data sets (built in the parent process with our RecordWriter)
# --------------------------------------------------------------------------

@dataset("blobs_1mib", full={"records": 1000, "record_bytes": 1 << 20, "seed": 0},
         quick={"records": 64, "record_bytes": 1 << 20, "seed": 0},
         describe=lambda p: (f"{p['records']} records x {p['record_bytes'] >> 20} MiB of random bytes "
                             f"({p['records'] * p['record_bytes'] / 1e9:.2f} GB of payload)"))
def build_blobs(path: str, p: dict) -> dict:
    import numpy as np

    from tfrecord_torch import RecordWriter

    rng = np.random.default_rng(p["seed"])
    n, size = p["records"], p["record_bytes"]
    with RecordWriter(path) as w:
        for i in range(n):
            # The record number in the first 8 bytes: the checksum workers compute.
            w.write(i.to_bytes(8, "little") + rng.bytes(size - 8))
    return {"records": n, "bytes": n * size, "checksum": n * (n - 1) // 2}


def _small_example(make_example, label: int, x) -> bytes:
    return make_example({"label": label, "x": x})


@dataset("examples_small", full={"records": 200_000, "floats": 32, "label_mod": 1000, "seed": 0},
         quick={"records": 20_000, "floats": 32, "label_mod": 1000, "seed": 0},
         describe=lambda p: (f"{p['records']:,} tf.train.Examples: int64 'label' (i % {p['label_mod']}) "
                             f"+ {p['floats']}-float 'x'"))
def build_examples(path: str, p: dict) -> dict:
    import numpy as np

    from tfrecord_torch import RecordWriter, make_example

    rng = np.random.default_rng(p["seed"])
    n, mod = p["records"], p["label_mod"]
    xs = rng.standard_normal((n, p["floats"]), dtype=np.float32)
    with RecordWriter(path) as w:
        for i in range(n):
            w.write(_small_example(make_example, i % mod, xs[i]))
        payload = w.offset - 16 * n
    return {"records": n, "bytes": payload, "checksum": sum(i % mod for i in range(n))}


def build_corrupt(path: str) -> None:
    """Ten small Examples; record 4 has one payload bit flipped inside a float
    of 'x', so it still decodes: only a CRC check can notice."""
    import numpy as np

    from tfrecord_torch import RecordWriter, make_example

    xs = np.random.default_rng(1).standard_normal((10, 32), dtype=np.float32)
    with RecordWriter(path) as w:
        offsets = [w.write(_small_example(make_example, i, xs[i])) for i in range(10)]
    with open(path, "rb") as f:
        data = bytearray(f.read())
    # Record 4 ends where record 5's header starts: 4 footer bytes, and before
    # them its last float; flip the low bit of that float's low mantissa byte.
    data[offsets[5] - 4 - 4] ^= 0x01
    with open(path, "wb") as f:
        f.write(data)


# --------------------------------------------------------------------------
# Case (a): framing throughput, 1 MiB records, CRC verification on
# --------------------------------------------------------------------------

case("framing_1mib", dataset="blobs_1mib", unit="GB/s", repeats=5, quick_repeats=2,
     title="Framing: iterate 1 MiB records from the page cache, CRCs verified where supported",
     short="framing_1mib: 1 MiB records from the page cache")


def _blob_tally(payloads) -> dict:
    records = nbytes = checksum = 0
    for p in payloads:
        records += 1
        nbytes += len(p)
        checksum += int.from_bytes(p[:8], "little")
    return {"records": records, "bytes": nbytes, "checksum": checksum}


@worker("framing_1mib", "ours", note="read_records(path, verify=True); yields bytes")
def framing_ours(path):
    from tfrecord_torch import read_records

    return lambda: _blob_tally(read_records(path, verify=True))


@worker("framing_1mib", "ours verify=False",
        note="read_records(path, verify=False): same reader, CRC checks off (like tfrecord)")
def framing_ours_noverify(path):
    from tfrecord_torch import read_records

    return lambda: _blob_tally(read_records(path, verify=False))


@worker("framing_1mib", "tfrecord",
        note="tfrecord.reader.tfrecord_iterator; reads both CRC fields and never checks them; "
             "yields a memoryview into one reused buffer")
def framing_tfrecord(path):
    from tfrecord.reader import tfrecord_iterator

    return lambda: _blob_tally(tfrecord_iterator(path))


@worker("framing_1mib", "tf.data",
        note="tf.data.TFRecordDataset(path).as_numpy_iterator() (default buffer); "
             "TF checks both CRCs; yields bytes")
def framing_tf(path):
    import tensorflow as tf

    def run():
        return _blob_tally(tf.data.TFRecordDataset(path).as_numpy_iterator())
    return run


@worker("framing_1mib", "tf.data in-graph",
        note="the same reader with no per-record Python: Dataset.reduce summing records, "
             "lengths and the record numbers in TF ops (TF's best case; bytes never reach Python)")
def framing_tf_graph(path):
    import tensorflow as tf

    def step(acc, x):
        number = tf.io.decode_raw(tf.strings.substr(x, 0, 8), tf.int64)[0]
        return (acc[0] + 1, acc[1] + tf.cast(tf.strings.length(x), tf.int64), acc[2] + number)

    zero = tf.constant(0, tf.int64)

    @tf.function
    def total():
        return tf.data.TFRecordDataset(path).reduce((zero, zero, zero), step)

    def run():
        records, nbytes, checksum = (int(v) for v in total())
        return {"records": records, "bytes": nbytes, "checksum": checksum}
    return run


@worker("framing_1mib", "baseline: readinto",
        note="ceiling, not a peer: file.readinto one reused 1 MiB buffer, no framing, no CRC")
def framing_baseline(path):
    def run():
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        nbytes = 0
        with open(path, "rb", buffering=0) as f:
            while True:
                got = f.readinto(view)
                if not got:
                    break
                nbytes += got
        return {"file_bytes": nbytes}
    return run


# --------------------------------------------------------------------------
# Case (b): small-record parse to numpy
# --------------------------------------------------------------------------

case("parse_small", dataset="examples_small", unit="records/s", repeats=3, quick_repeats=2,
     title="Parse small tf.train.Examples (int64 label + 32 floats) to numpy",
     short="parse_small: small Examples to numpy")

BATCH = 1024


def _record_tally(dicts) -> dict:
    """Per-record dicts: each value an array, label of shape [1]."""
    records = checksum = 0
    for d in dicts:
        records += 1
        checksum += int(d["label"][0])
    return {"records": records, "checksum": checksum}


def _batch_tally(batches) -> dict:
    """Batched dicts: label [B] (or [B, 1]), x [B, 32]."""
    records = checksum = 0
    for b in batches:
        records += len(b["x"])
        checksum += int(b["label"].sum())
    return {"records": records, "checksum": checksum}


@worker("parse_small", "ours", note="read_records + parse_example per record (CRCs verified)")
def parse_ours(path):
    from tfrecord_torch import parse_example, read_records

    return lambda: _record_tally(map(parse_example, read_records(path)))


@worker("parse_small", "ours_batched",
        note="iter_chunks(open_stream(path), verify=True) + parse_example_batch: one batch of "
             "numpy columns per 1 MiB read chunk")
def parse_ours_batched(path):
    from tfrecord_torch import parse_example_batch
    from tfrecord_torch.framing import iter_chunks
    from tfrecord_torch.streams import open_stream

    def batches():
        with open_stream(path) as stream:
            for chunk in iter_chunks(stream, verify=True):
                yield parse_example_batch(chunk)
    return lambda: _batch_tally(batches())


_TFRECORD_DESC = {"label": "int", "x": "float"}


@worker("parse_small", "tfrecord",
        note='tfrecord.torch.dataset.TFRecordDataset(path, None, {"label": "int", "x": "float"}) '
             "iterated; no CRC check")
def parse_tfrecord(path):
    from tfrecord.torch.dataset import TFRecordDataset

    return lambda: _record_tally(TFRecordDataset(path, None, _TFRECORD_DESC))


@worker("parse_small", "tfrecord + DataLoader",
        note=f"same through torch DataLoader(batch_size={BATCH}, num_workers=0): "
             "batches of torch tensors; no CRC check")
def parse_tfrecord_loader(path):
    import torch.utils.data
    from tfrecord.torch.dataset import TFRecordDataset

    def run():
        loader = torch.utils.data.DataLoader(TFRecordDataset(path, None, _TFRECORD_DESC),
                                             batch_size=BATCH, num_workers=0)
        return _batch_tally(loader)
    return run


def _tf_desc(tf):
    return {"label": tf.io.FixedLenFeature([], tf.int64), "x": tf.io.FixedLenFeature([32], tf.float32)}


@worker("parse_small", "tf.data batch+parse_example",
        note=f"TFRecordDataset.batch({BATCH}).map(tf.io.parse_example).as_numpy_iterator(); "
             "CRCs checked")
def parse_tf_batched(path):
    import tensorflow as tf

    desc = _tf_desc(tf)

    def run():
        ds = tf.data.TFRecordDataset(path).batch(BATCH).map(lambda b: tf.io.parse_example(b, desc))
        return _batch_tally(ds.as_numpy_iterator())
    return run


@worker("parse_small", "tf.data parse_single+batch",
        note=f"TFRecordDataset.map(parse_single_example, AUTOTUNE).batch({BATCH})"
             ".as_numpy_iterator(); CRCs checked")
def parse_tf_single(path):
    import tensorflow as tf

    desc = _tf_desc(tf)

    def run():
        ds = (tf.data.TFRecordDataset(path)
              .map(lambda r: tf.io.parse_single_example(r, desc), num_parallel_calls=tf.data.AUTOTUNE)
              .batch(BATCH))
        return _batch_tally(ds.as_numpy_iterator())
    return run


# --------------------------------------------------------------------------
# Worker process
# --------------------------------------------------------------------------

def _check(tally: dict, expected: dict) -> None:
    for key, value in tally.items():
        if expected.get(key) != value:
            raise AssertionError(f"wrong result: {key} = {value}, expected {expected.get(key)}")


def _probe(make, corrupt: str) -> str:
    """Read the corrupted file; say whether the implementation noticed."""
    try:
        make(corrupt)()
    except Exception as e:  # noqa: BLE001 - any error means it noticed
        return f"CRC probe: corrupt payload detected ({type(e).__name__})", f"{type(e).__name__}: {e}"
    return "CRC probe: corrupt payload NOT detected (read silently)", None


def run_worker(name: str, spec: dict) -> dict:
    case_name, impl_name = name.split("/", 1)
    impl = CASES[case_name].impls[impl_name]
    t0 = time.perf_counter()
    run = impl.make(spec["path"])
    setup = time.perf_counter() - t0
    probe, probe_error = _probe(impl.make, spec["corrupt"])
    expected = spec["expected"]
    _check(run(), expected)  # warm-up pass
    walls, cpus = [], []
    for _ in range(spec["repeats"]):
        gc.collect()
        w0, c0 = time.perf_counter(), time.process_time()
        tally = run()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        _check(tally, expected)
    median = statistics.median(walls)
    mid = min(range(len(walls)), key=lambda i: abs(walls[i] - median))
    try:
        import resource
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    except ImportError:  # not on Linux/macOS
        peak_rss_mb = None
    return {"walls": walls, "cpus": cpus, "cpu_util": cpus[mid] / walls[mid], "setup_s": setup,
            "probe": probe, "probe_error": probe_error, "peak_rss_mb": peak_rss_mb}


# --------------------------------------------------------------------------
# Parent process
# --------------------------------------------------------------------------

def _version(dist: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    try:
        from google.protobuf.internal import api_implementation
        pb_impl = api_implementation.Type()
    except ImportError:
        pb_impl = "?"
    return {
        "cpu": cpu, "cores": os.cpu_count(), "usable_cores": usable,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": _version("torch"),
        "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        "tfrecord": _version("tfrecord"),
        "tfrecord_torch": _version("tfrecord_torch"),
        "numpy": _version("numpy"),
        "protobuf": f"{_version('protobuf')} ({pb_impl})",
        "crc32c": _version("crc32c"),
    }


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def command_line() -> str:
    exe = sys.executable
    rel = os.path.relpath(exe)
    if not rel.startswith(".."):
        exe = rel if os.sep in rel else f".{os.sep}{rel}"
    return shlex.join([exe, *sys.argv])


def ensure_dataset(ds: Dataset, params: dict, folder: str, log) -> tuple[str, dict]:
    """The data set's file and expected tally, built unless a matching one exists."""
    path = os.path.join(folder, f"{ds.name}.tfrecord")
    meta_path = os.path.join(folder, f"{ds.name}.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        if (meta["version"] == DATA_VERSION and meta["params"] == params
                and os.path.getsize(path) == meta["file_bytes"]):
            log(f"data set {ds.name}: reusing {path}")
            return path, meta["expected"]
    except (OSError, ValueError, KeyError):
        pass
    log(f"data set {ds.name}: writing {path} ({ds.describe(params)}) ...")
    t0 = time.perf_counter()
    expected = ds.build(path, params)
    expected["file_bytes"] = os.path.getsize(path)
    meta = {"version": DATA_VERSION, "params": params, "file_bytes": expected["file_bytes"],
            "expected": expected}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    log(f"data set {ds.name}: written in {time.perf_counter() - t0:.1f} s")
    return path, expected


def warm_page_cache(path: str) -> float:
    """Read the file once; returns the time it took."""
    t0 = time.perf_counter()
    buf = bytearray(8 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return time.perf_counter() - t0


def worker_env() -> dict:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.pop("PYTHONHASHSEED", None)
    return env


def _machine_busy() -> float | None:
    """CPU seconds the whole machine has spent busy (all cores, incl. steal), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...
    busy = sum(fields[:3]) + sum(fields[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    """CPU seconds used by this process and its finished children."""
    import resource
    own = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        own += r.ru_utime + r.ru_stime
    return own


def run_subprocess(name: str, spec: dict, log_path: str, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--spec", json.dumps(spec)]
    busy0, own0 = _machine_busy(), _own_cpu()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=worker_env(), timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out, err, rc = e.stdout or "", e.stderr or "", f"timeout after {timeout:.0f} s"
    else:
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    if isinstance(out, bytes):
        out = out.decode(errors="replace")
    if isinstance(err, bytes):
        err = err.decode(errors="replace")
    with open(log_path, "w") as f:
        f.write(f"$ {shlex.join(cmd)}\n--- stdout\n{out}\n--- stderr\n{err}\n--- exit {rc}\n")
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK):])
            result["process_s"] = time.perf_counter() - t0
            busy1 = _machine_busy()
            if busy0 is not None and busy1 is not None:
                # Busy time of the machine not spent by us: other processes (or steal).
                result["other_cores"] = max(0.0, (busy1 - busy0) - (_own_cpu() - own0)) / result["process_s"]
            return result
    tail = "\n".join(err.strip().splitlines()[-5:])
    return {"error": f"exit {rc}: {tail}"}


def fmt_throughput(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "records/s":
        return f"{value:,.0f}"
    return f"{value:.2f}"


def render(results: list[dict], header: dict, notes: list[str]) -> str:
    m = header["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), {m['os']}; "
        f"Python {m['python']}, torch {m['torch']}, TensorFlow {m['tensorflow']}, "
        f"tfrecord {m['tfrecord']}, numpy {m['numpy']}, protobuf {m['protobuf']}, crc32c {m['crc32c']}",
        f"Command: `{header['command']}` (in {header['cwd']}), started {header['date']}; "
        f"1-min load average at start / end: {header['loadavg_start']} / {header['loadavg_end']}",
        "",
        "| case | implementation | throughput (median) | best | unit | this/ours | ours is N× "
        "(ours ÷ this) | CPU | note |",
        "|---|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['impl']} | FAILED | | {r['unit']} | | | | "
                         f"{r['error'].replace('|', '/').replace(chr(10), ' ')} |")
            continue
        if r["impl"] == "ours":
            this_ours, ours_is = "1.00 (ref)", "1.00 (ref)"
        elif r.get("ours_is") is not None:
            this_ours, ours_is = f"{1 / r['ours_is']:.2f}", f"{r['ours_is']:.2f}x"
        else:
            this_ours = ours_is = "-"
        lines.append(
            f"| {r['case']} | {r['impl']} | {fmt_throughput(r['throughput'], r['unit'])} | "
            f"{fmt_throughput(r['best'], r['unit'])} | {r['unit']} | {this_ours} | {ours_is} | "
            f"{r['cpu_util']:.2f} | {r['note']}; {r['probe']} |")
    lines.append("")
    lines.extend(f"- {n}" for n in notes)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small data and 2 repeats: a smoke test")
    ap.add_argument("--out", default="bench-output", help="folder for data sets and results")
    ap.add_argument("--only", default="", help="comma-separated CASE or CASE/IMPL to run")
    ap.add_argument("--repeats", type=int, help="timed passes per implementation (default per case)")
    ap.add_argument("--list", action="store_true", help="list cases and implementations")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        result = run_worker(args.worker, json.loads(args.spec))
        print(RESULT_MARK + json.dumps(result), flush=True)
        return 0

    if args.list:
        for c in CASES.values():
            print(f"{c.name}: {c.title}")
            for i in c.impls.values():
                print(f"  {c.name}/{i.name}: {i.note}")
        return 0

    started = time.perf_counter()
    load_start = _loadavg()
    date = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    log = lambda msg: print(f"[bench {time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr,
                            flush=True)
    wanted = [w for w in args.only.split(",") if w]
    selected = [(c, i) for c in CASES.values() for i in c.impls.values()
                if not wanted or c.name in wanted or f"{c.name}/{i.name}" in wanted]
    if not selected:
        ap.error(f"--only {args.only!r} matches nothing (see --list)")

    out = args.out
    data_dir = os.path.join(out, "data")
    log_dir = os.path.join(out, "logs")
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(log_dir, exist_ok=True)

    files: dict[str, tuple[str, dict]] = {}
    warm: dict[str, float] = {}
    for name in dict.fromkeys(c.dataset for c, _ in selected):
        ds = DATASETS[name]
        files[name] = ensure_dataset(ds, ds.quick if args.quick else ds.full, data_dir, log)
        warm[name] = warm_page_cache(files[name][0])
    corrupt = os.path.join(data_dir, "corrupt.tfrecord")
    build_corrupt(corrupt)

    results = []
    timeout = 600 if args.quick else 3600
    for c, impl in selected:
        repeats = args.repeats or (c.quick_repeats if args.quick else c.repeats)
        path, expected = files[c.dataset]
        spec = {"path": os.path.abspath(path), "corrupt": os.path.abspath(corrupt),
                "expected": expected, "repeats": repeats}
        name = f"{c.name}/{impl.name}"
        log(f"{name}: running ({repeats} timed passes) ...")
        log_path = os.path.join(log_dir, name.replace("/", "__").replace(" ", "_").replace(":", "")
                                + ".log")
        r = run_subprocess(name, spec, log_path, timeout)
        row = {"case": c.name, "impl": impl.name, "unit": c.unit, "note": impl.note,
               "repeats": repeats, **r}
        if "error" not in r:
            amount = expected["bytes"] / 1e9 if c.unit == "GB/s" else expected["records"]
            row["throughput"] = amount / statistics.median(r["walls"])
            row["best"] = amount / min(r["walls"])
            log(f"{name}: {fmt_throughput(row['throughput'], c.unit)} {c.unit} "
                f"(process {r['process_s']:.1f} s)")
        else:
            log(f"{name}: FAILED {r['error']}")
        results.append(row)

    by_case = {(r["case"], r["impl"]): r for r in results}
    for r in results:
        ours = by_case.get((r["case"], "ours"))
        if ours and "error" not in ours and "error" not in r:
            r["ours_is"] = ours["throughput"] / r["throughput"]

    header = {"machine": machine_info(), "command": command_line(), "cwd": os.getcwd(),
              "date": date, "quick": args.quick,
              "loadavg_start": load_start, "loadavg_end": _loadavg()}
    notes = []
    for c in dict.fromkeys(c for c, _ in selected):
        ds = DATASETS[c.dataset]
        params = ds.quick if args.quick else ds.full
        notes.append(f"{c.name}: {c.title}. Data: {ds.describe(params)}, "
                     f"{files[c.dataset][1]['file_bytes'] / 1e6:,.1f} MB file "
                     f"(page-cache warm-up read: {warm[c.dataset]:.2f} s).")
    notes += [
        "Each row ran in its own process: 1 untimed warm-up pass, then the timed passes "
        "(throughput = median pass, best = fastest); every pass checked for the right record "
        "count and checksum. GB = 1e9 payload bytes.",
        "'ours is N×' = throughput of this case's `ours` row ÷ throughput of this row "
        "(above 1: ours is faster); 'this/ours' is its inverse.",
        "CPU = process CPU time ÷ wall time in the median pass (1.00 = one core busy).",
        "CRC probe: each implementation also read a 10-record file with one flipped bit inside a "
        "float of record 4 (the proto still decodes, only a CRC check can tell).",
    ]
    noisy = [f"{r['case']}/{r['impl']} ({r['other_cores']:.2f})" for r in results
             if (r.get("other_cores") or 0) > 0.1]
    if noisy:
        notes.append("WARNING: other processes were busy while these rows ran (cores they used "
                     f"on average): {', '.join(noisy)}; their numbers may be low. Rerun on an idle "
                     "machine to compare.")
    else:
        notes.append("Other processes used under 0.1 core during every row (from /proc/stat).")
    table = render(results, header, notes)
    total = time.perf_counter() - started
    table += f"- Total run time: {total:.0f} s.\n"
    print(table)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({**header, "total_s": total, "notes": notes, "results": results,
                   "datasets": {n: {"path": p, "expected": e} for n, (p, e) in files.items()}},
                  f, indent=1)
    failed = [f"{r['case']}/{r['impl']}" for r in results if "error" in r]
    if failed:
        print(f"FAILED: {', '.join(failed)} (logs in {log_dir})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
