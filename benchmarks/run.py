#!/usr/bin/env python
"""Benchmarks: tfrecord_torch side by side with tf.data and the ``tfrecord`` package.

Usage::

    .venv/bin/python benchmarks/run.py [--quick] [--out DIR] [--only CASE[/IMPL],...] [--repeats N] [--jobs N]

(or ``bash dev.sh bench``). Prints a Markdown table and writes it to
``DIR/results.md`` and ``DIR/results.json``, with a bar chart of every case in
``DIR/results.png`` (matplotlib; DIR defaults to ``bench-output``).

Cases: ``framing_1mib`` (1 MiB records), ``parse_small`` (small Examples to
numpy), ``images`` (JPEG records to batches of uint8 tensors through a
DataLoader, against tf.data and the decoder's own limit), ``small_loader``
(small Examples to batched tensors through a DataLoader), ``memory`` (RSS
growth over epochs), ``convert`` (write_dataset against a TensorFlow writer
loop and ``cp -r``). Targets are reported under the table, not asserted.

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
  probe, reported in the note column: does the implementation notice?; only
  cases whose rows read the small-Example schema), then makes one untimed
  warm-up pass (not with --quick), then times ``repeats`` full passes. The
  throughput is the median pass; "best" is the fastest. Each pass is checked
  against the data set (record count, payload bytes, a checksum of the decoded
  values), so an implementation cannot win by skipping work.
* "CPU" is CPU time / wall time of the median pass, of the worker process (all
  threads) and its child processes (DataLoader workers, pools): 1.0 means one
  core busy.
* A measure case (``memory``) runs once and reports a value, not a
  throughput; its ratio columns are n/a.

Adding a case
-------------
Register a data set with :func:`dataset` (a builder writing the file, or with
``folder=True`` a folder, and returning its expected tally) and implementations
with ``@worker(case, impl, note=...)``. An implementation is a function
``make(path) -> run`` that does its imports and set-up and returns ``run()``,
one full pass over the file returning a tally dict (``records`` and
``checksum``, optionally ``bytes``, ``pixels``), each checked against the data
set's; a pass that times itself adds ``seconds`` (and ``cpu_seconds``).
``SPEC`` holds the worker's spec (``params`` of the data set, ``quick``,
``scratch`` for output). A case's unit is one of ``UNITS``; its row named
``ours`` (or ``case(ref=...)``, or ``worker(ref=...)`` per row) is the
reference for the ratios. ``TARGETS`` lists the reported targets. ``--list``
shows the registry.
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
from collections.abc import Callable
from dataclasses import dataclass, field

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
    ref: str | None = None  # the row its ratios compare with (default: the case's ref)


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
    ref: str = "ours"  # the row the ratios compare with
    impls: dict[str, Impl] = field(default_factory=dict)

    def ref_of(self, impl: str) -> str:
        return self.impls[impl].ref or self.ref


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
         probe: bool = True, measure: bool = False, short: str = "", ref: str = "ours") -> None:
    assert unit in UNITS, unit
    CASES[name] = Case(name, dataset, unit, repeats, quick_repeats, title, probe, measure,
                       short or title, ref)


def worker(case_name: str, impl: str, *, note: str, ref: str | None = None):
    """Register ``make(path) -> run`` as implementation ``impl`` of a case
    (``ref``: the row its ratios compare with, if not the case's)."""
    def register(make):
        CASES[case_name].impls[impl] = Impl(impl, make, note, ref)
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
    from tfrecord_torch.records.framing import iter_chunks
    from tfrecord_torch.records.streams import open_stream

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
# Synthetic photos for the image cases
# --------------------------------------------------------------------------

def synth_image(seed: int, i: int, size: int):
    """A photo-like uint8 image [size, size, 3]: a two-colour gradient, a soft
    blob, a fine random texture, a few flat shapes and mild sensor noise. At
    256x256, JPEG quality 90 makes ~24 KB of it (a typical ImageNet-sized
    thumbnail); pure noise would be far larger, flat colour far smaller."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng([seed, i])
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    c0, c1, c2 = rng.uniform(0, 255, (3, 3)).astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    t = np.cos(angle) * xx + np.sin(angle) * yy
    t = ((t - t.min()) / (np.ptp(t) + 1e-6))[..., None]
    img = c0 * (1 - t) + c1 * t
    cx, cy, r = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.5)
    w = np.clip(1 - np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2) / r, 0, 1)[..., None]
    img = img * (1 - w) + c2 * w
    field = rng.standard_normal((max(size // 4, 2),) * 2 + (3,), dtype=np.float32)
    texture = Image.fromarray(np.clip(field * 40 + 128, 0, 255).astype(np.uint8)).resize(
        (size, size), Image.BICUBIC)
    img += (np.asarray(texture, np.float32) - 128) * (27 / 40)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    scale = size / 256
    for _ in range(int(rng.integers(3, 8))):
        x0, y0 = (int(v) for v in rng.integers(0, size, 2))
        x1, y1 = (x0 + int(rng.integers(10, 120) * scale), y0 + int(rng.integers(10, 120) * scale))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = int(rng.integers(3))
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=colour)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
        else:
            draw.line([x0, y0, x1, y1], fill=colour, width=max(1, int(rng.integers(2, 8) * scale)))
    arr = np.asarray(im.filter(ImageFilter.GaussianBlur(0.8 * scale)), np.float32)
    arr += rng.standard_normal(arr.shape, dtype=np.float32) * 6.5
    return np.clip(arr, 0, 255).astype(np.uint8)


def _synth_jpeg(job) -> bytes:
    import io

    from PIL import Image

    seed, i, size, quality = job
    buf = io.BytesIO()
    Image.fromarray(synth_image(seed, i, size)).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def synth_jpegs(seed: int, n: int, size: int, quality: int):
    """The JPEG bytes of images 0..n-1, in order (made by 2 processes)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                      else "spawn")
    with ctx.Pool(2) as pool:
        yield from pool.imap(_synth_jpeg, ((seed, i, size, quality) for i in range(n)), chunksize=16)


@dataset("images_jpeg", full={"records": 4000, "size": 256, "quality": 90, "classes": 100, "seed": 0},
         quick={"records": 128, "size": 256, "quality": 90, "classes": 100, "seed": 0},
         describe=lambda p: (f"{p['records']:,} tf.train.Examples: 'image' = a {p['size']}x{p['size']} "
                             f"RGB JPEG (quality {p['quality']}, synthetic photo-like: gradient, blob, "
                             f"texture, shapes, noise) + int64 'label' (i % {p['classes']})"))
def build_images(path: str, p: dict) -> dict:
    from tfrecord_torch import RecordWriter, make_example

    n, classes, jpeg_bytes = p["records"], p["classes"], 0
    with RecordWriter(path) as w:
        for i, data in enumerate(synth_jpegs(p["seed"], n, p["size"], p["quality"])):
            w.write(make_example({"image": data, "label": i % classes}))
            jpeg_bytes += len(data)
        payload = w.offset - 16 * n
    return {"records": n, "bytes": payload, "checksum": sum(i % classes for i in range(n)),
            "pixels": n * 3 * p["size"] ** 2, "about": f"mean JPEG {jpeg_bytes / n / 1e3:.1f} KB"}


# --------------------------------------------------------------------------
# Case (c): image pipeline, JPEG records to batches of uint8 tensors
# --------------------------------------------------------------------------

case("images", dataset="images_jpeg", unit="images/s", repeats=3, quick_repeats=1, probe=False,
     title="Image pipeline: JPEG records to batches of 64 uint8 images, on 2 cores",
     short="images: JPEG records to uint8 batches [64, 3, 256, 256]")

IMAGE_BATCH = 64


def _image_tally(batches) -> dict:
    """Batches with 'label' [B] and 'image' [B, ...] (torch or numpy)."""
    import math

    records = checksum = pixels = 0
    for b in batches:
        records += len(b["label"])
        checksum += int(b["label"].sum())
        pixels += math.prod(b["image"].shape)
    return {"records": records, "checksum": checksum, "pixels": pixels}


@worker("images", "ours",
        note=f"TFRecordDataset(path, features=presets.tfds()) through DataLoader(batch_size={IMAGE_BATCH}, "
             "num_workers=2): uint8 tensors [64, 3, 256, 256] (torchvision decoder); CRCs verified")
def images_ours(path):
    import torch.utils.data

    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds())
    return lambda: _image_tally(torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, num_workers=2))


@worker("images", "ours, torchvision imported first",
        note="the same, with `import torchvision.io` in the main process before the DataLoader starts: "
             "the forked workers inherit it instead of each importing it at its first image, every epoch")
def images_ours_preloaded(path):
    import torchvision.io  # noqa: F401

    return images_ours(path)


@worker("images", "ours batch mode",
        note=f"TFRecordDataset(path, features=presets.tfds(), batch_size={IMAGE_BATCH}) through "
             "DataLoader(batch_size=None, num_workers=2): each worker reads and decodes whole batches "
             "(torchvision imported first, as in the row above)")
def images_ours_batched(path):
    import torch.utils.data
    import torchvision.io  # noqa: F401

    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds(), batch_size=IMAGE_BATCH)
    return lambda: _image_tally(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))


@worker("images", "tf.data",
        note="TFRecordDataset(path).map(parse_single_example + tf.io.decode_jpeg(channels=3), "
             f"num_parallel_calls=AUTOTUNE).batch({IMAGE_BATCH}).prefetch(AUTOTUNE).as_numpy_iterator(): "
             "uint8 [64, 256, 256, 3]; CRCs checked")
def images_tf(path):
    import tensorflow as tf

    desc = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        ex = tf.io.parse_single_example(record, desc)
        return {"image": tf.io.decode_jpeg(ex["image"], channels=3), "label": ex["label"]}

    def run():
        ds = (tf.data.TFRecordDataset(path).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
              .batch(IMAGE_BATCH).prefetch(tf.data.AUTOTUNE))
        return _image_tally(ds.as_numpy_iterator())
    return run


_JPEGS: list = []  # decode-only limit: the JPEGs as uint8 tensors, inherited by the forked pool


def _decoder_init() -> None:
    import torch

    torch.set_num_threads(1)


def _decode_share(bounds) -> tuple[int, int]:
    import warnings

    from torchvision.io import ImageReadMode, decode_image

    lo, hi = bounds
    records = pixels = 0
    with warnings.catch_warnings():  # torchvision 0.29 announces a move to torchcodec
        warnings.simplefilter("ignore", DeprecationWarning)
        for data in _JPEGS[lo:hi]:
            pixels += decode_image(data, mode=ImageReadMode.RGB).numel()
            records += 1
    return records, pixels


@worker("images", "decode-only limit",
        note="ceiling, not a peer: torchvision.io.decode_image(mode=RGB), the decoder ours uses, over the "
             "same JPEGs already in memory as uint8 tensors; 2 forked processes each decode half "
             "(multiprocessing Pool(2), wall time of the whole pass); no reading, parsing, batching")
def images_decode_limit(path):
    import multiprocessing

    import torch
    import torchvision.io  # noqa: F401 - imported once, before the fork

    from tfrecord_torch import parse_example, read_records

    labels = 0
    for payload in read_records(path):
        record = parse_example(payload)
        _JPEGS.append(torch.frombuffer(bytearray(record["image"][0]), dtype=torch.uint8))
        labels += int(record["label"][0])
    n = len(_JPEGS)
    pool = multiprocessing.get_context("fork").Pool(2, initializer=_decoder_init)
    shares = [(0, n // 2), (n // 2, n)]

    def run():
        done = pool.map(_decode_share, shares, chunksize=1)
        return {"records": sum(r for r, _ in done), "pixels": sum(p for _, p in done), "checksum": labels}
    return run


# --------------------------------------------------------------------------
# Case (d): small records to batched tensors through a DataLoader
# --------------------------------------------------------------------------

case("small_loader", dataset="examples_small", unit="records/s", repeats=3, quick_repeats=1,
     title=f"Small Examples (int64 label + 32 floats) to batches of {BATCH} tensors through a DataLoader",
     short=f"small_loader: small Examples to batches of {BATCH} tensors")

_SMALL_SPEC = 'features={"label": Int64(), "x": Float(shape=(32,))}'


def _small_loader_ours(path, workers: int):
    import torch.utils.data

    from tfrecord_torch import Float, Int64, TFRecordDataset

    ds = TFRecordDataset(path, features={"label": Int64(), "x": Float(shape=(32,))}, batch_size=BATCH)
    return lambda: _batch_tally(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))


@worker("small_loader", "ours",
        note=f"TFRecordDataset(path, {_SMALL_SPEC}, batch_size={BATCH}) through DataLoader(batch_size=None, "
             "num_workers=0): label [1024], x [1024, 32], decoded in the main process like tf.data's "
             "in-process batch; CRCs verified")
def small_loader_ours(path):
    return _small_loader_ours(path, 0)


@worker("small_loader", "ours num_workers=2",
        note="the same with num_workers=2: each worker decodes whole batches, which then cross to the "
             "main process through shared memory")
def small_loader_ours2(path):
    return _small_loader_ours(path, 2)


worker("small_loader", "tf.data batch+parse_example",
       note=CASES["parse_small"].impls["tf.data batch+parse_example"].note)(parse_tf_batched)
worker("small_loader", "tfrecord + DataLoader",
       note=CASES["parse_small"].impls["tfrecord + DataLoader"].note)(parse_tfrecord_loader)


@worker("small_loader", "tfrecord + DataLoader workers=2",
        note='tfrecord.torch.dataset.TFRecordDataset(path, index, {"label": "int", "x": "float"}) '
             f"through DataLoader(batch_size={BATCH}, num_workers=2); the index (ours, same format) "
             "splits the file between the workers; no CRC check")
def parse_tfrecord_loader2(path):
    import torch.utils.data
    from tfrecord.torch.dataset import TFRecordDataset

    from tfrecord_torch import build_index

    index = path + ".index"
    if not os.path.exists(index):
        build_index(path)

    def run():
        loader = torch.utils.data.DataLoader(TFRecordDataset(path, index, _TFRECORD_DESC),
                                             batch_size=BATCH, num_workers=2)
        return _batch_tally(loader)
    return run


# --------------------------------------------------------------------------
# Case (e): resident memory over epochs
# --------------------------------------------------------------------------

MEMORY_EPOCHS, MEMORY_QUICK_EPOCHS = 10, 2

case("memory", dataset="images_jpeg", unit="% RSS growth", repeats=1, quick_repeats=1, probe=False,
     measure=True,
     title=f"Resident memory over {MEMORY_EPOCHS} epochs of the image data (--quick: "
           f"{MEMORY_QUICK_EPOCHS}): each epoch's peak RSS of the main process + its live DataLoader "
           "workers (sampled every 50 ms and at every batch; a worker that finished its share has "
           "exited, so one sample at the last batch would count one worker or two); value = the "
           "largest later peak relative to epoch 1's (lower is better)",
     short=f"memory: RSS growth after epoch 1, {MEMORY_EPOCHS} epochs (lower is better)")


@worker("memory", "ours",
        note=f"TFRecordDataset(path, features=presets.tfds(), shuffle=True), set_epoch each epoch, "
             f"DataLoader(batch_size={IMAGE_BATCH}, num_workers=2, persistent_workers=False); "
             "psutil RSS of the process and its children")
def memory_ours(path):
    import psutil
    import torch.utils.data

    from tfrecord_torch import TFRecordDataset, presets

    epochs = MEMORY_QUICK_EPOCHS if SPEC.get("quick") else MEMORY_EPOCHS
    me = psutil.Process()
    ds = TFRecordDataset(path, features=presets.tfds(), shuffle=True, seed=0)

    def rss() -> tuple[int, int]:
        main = total = me.memory_info().rss
        for child in me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return main, total

    peak = [0]

    def sample(stop) -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], rss()[1])

    def run():
        import threading

        totals, mains = [], []
        for epoch in range(epochs):
            ds.set_epoch(epoch)
            loader = torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, num_workers=2,
                                                 persistent_workers=False)
            tally = {"records": 0, "checksum": 0}
            peak[0] = 0
            stop = threading.Event()
            sampler = threading.Thread(target=sample, args=(stop,), daemon=True)
            sampler.start()
            for batch in loader:
                tally["records"] += len(batch["label"])
                tally["checksum"] += int(batch["label"].sum())
                peak[0] = max(peak[0], rss()[1])
            stop.set()
            sampler.join()
            del batch
            _check(tally, SPEC["expected"])
            totals.append(peak[0])
            mains.append(rss()[0])  # after the epoch: the workers are gone
        growth = max((t - totals[0]) / totals[0] * 100 for t in totals[1:])
        main_growth = max((m - mains[0]) / mains[0] * 100 for m in mains[1:])
        mb = lambda vs: ", ".join(f"{v / 2**20:.0f}" for v in vs)
        return {"value": growth,
                "samples": {"total_rss": totals, "main_rss": mains},
                "detail": f"peak RSS per epoch, MB: {mb(totals)} (main process alone after each "
                          f"epoch: {mb(mains)}; its largest growth after epoch 1: {main_growth:+.1f}%)"}
    return run


# --------------------------------------------------------------------------
# Case (f): conversion throughput
# --------------------------------------------------------------------------

@dataset("convert_src", folder=True,
         full={"records": 2000, "array_size": 64, "file_size": 256, "quality": 90, "classes": 10, "seed": 1},
         quick={"records": 100, "array_size": 64, "file_size": 256, "quality": 90, "classes": 10, "seed": 1},
         describe=lambda p: (f"{p['records']:,} in-memory {p['array_size']}x{p['array_size']}x3 uint8 "
                             f"arrays (arrays.npy) and an ImageFolder of {p['records']:,} "
                             f"{p['file_size']}x{p['file_size']} JPEG files in {p['classes']} class folders "
                             "(folder/), both synthetic photo-like, label i % classes"),
         )
def build_convert(path: str, p: dict) -> dict:
    import numpy as np

    n, classes = p["records"], p["classes"]
    os.makedirs(path)
    arrays = np.stack([synth_image(p["seed"], i, p["array_size"]) for i in range(n)])
    np.save(os.path.join(path, "arrays.npy"), arrays)
    folder = os.path.join(path, "folder")
    for c in range(classes):
        os.makedirs(os.path.join(folder, f"class_{c:02d}"))
    for i, data in enumerate(synth_jpegs(p["seed"] + 1, n, p["file_size"], p["quality"])):
        with open(os.path.join(folder, f"class_{i % classes:02d}", f"{i:05d}.jpg"), "wb") as f:
            f.write(data)
    return {"records": n, "checksum": sum(i % classes for i in range(n))}


case("convert", dataset="convert_src", unit="images/s", repeats=3, quick_repeats=1, probe=False,
     ref="ours png",
     title="Conversion to TFRecord shards (timed: the conversion or copy alone, output into a fresh "
           "folder on the same disk, sources in the page cache)",
     short="convert: images to TFRecord shards")


class ArrayImages:
    """A map-style dataset of (uint8 array [H, W, 3], label)."""

    def __init__(self, arrays, num_classes: int) -> None:
        self.arrays, self.num_classes = arrays, num_classes

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, i: int):
        return self.arrays[i], i % self.num_classes


def _scratch() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="convert-", dir=SPEC["scratch"])


def _shards_tally(paths) -> dict:
    """Records and label sum of written shards (checked after the timing)."""
    from tfrecord_torch import parse_example, read_records

    records = checksum = 0
    for path in paths:
        for payload in read_records(path):
            records += 1
            checksum += int(parse_example(payload)["label"][0])
    return {"records": records, "checksum": checksum}


def _timed_conversion(convert) -> Callable[[], dict]:
    """run(): convert(dst) -> shard paths, timed alone; then checked, then removed."""
    import shutil

    def run():
        dst = _scratch()
        try:
            t0, c0 = time.perf_counter(), _cpu_total()
            paths = convert(dst)
            seconds, cpu = time.perf_counter() - t0, _cpu_total() - c0
            return {**_shards_tally(paths), "seconds": seconds, "cpu_seconds": cpu}
        finally:
            shutil.rmtree(dst, ignore_errors=True)
    return run


def _convert_png(path, workers: int):
    import numpy as np

    from tfrecord_torch import write_dataset

    data = ArrayImages(np.load(os.path.join(path, "arrays.npy")), SPEC["params"]["classes"])
    return _timed_conversion(lambda dst: write_dataset(data, dst, name="bench", image_format="png",
                                                       num_workers=workers, progress=False))


@worker("convert", "ours png",
        note="write_dataset(arrays, image_format='png', num_workers=2, progress=False): PNG-encode "
             "(Pillow, level 6), one shard + index + TFDS metadata")
def convert_ours_png(path):
    return _convert_png(path, 2)


@worker("convert", "ours png num_workers=0",
        note="the same encoding in one process (like the TensorFlow loop below)")
def convert_ours_png0(path):
    return _convert_png(path, 0)


@worker("convert", "tf writer png",
        note="plain loop: tf.io.encode_png(array) (zlib level 6, like ours) + tf.train.Example with "
             "the same features + tf.io.TFRecordWriter, one shard")
def convert_tf_png(path):
    import numpy as np
    import tensorflow as tf

    arrays = np.load(os.path.join(path, "arrays.npy"))
    classes = SPEC["params"]["classes"]
    feature = tf.train.Feature
    as_bytes = lambda v: feature(bytes_list=tf.train.BytesList(value=[v]))
    as_int = lambda v: feature(int64_list=tf.train.Int64List(value=[v]))

    def convert(dst):
        out = os.path.join(dst, "bench-train.tfrecord-00000-of-00001")
        with tf.io.TFRecordWriter(out) as writer:
            for i, array in enumerate(arrays):
                h, w, c = array.shape
                example = tf.train.Example(features=tf.train.Features(feature={
                    "image": as_bytes(tf.io.encode_png(array).numpy()), "format": as_bytes(b"png"),
                    "height": as_int(h), "width": as_int(w), "channels": as_int(c),
                    "label": as_int(i % classes)}))
                writer.write(example.SerializeToString())
        return [out]
    return _timed_conversion(convert)


@worker("convert", "ours ImageFolder copy", ref="ours ImageFolder copy",
        note="write_dataset(torchvision.datasets.ImageFolder(folder), progress=False): the JPEG files' "
             "bytes copied into records, not decoded (ImageFolder's scan included in the time)")
def convert_ours_folder(path):
    from torchvision.datasets import ImageFolder

    from tfrecord_torch import write_dataset

    folder = os.path.join(path, "folder")
    return _timed_conversion(lambda dst: write_dataset(ImageFolder(folder), dst, name="bench",
                                                       progress=False))


@worker("convert", "cp -r", ref="ours ImageFolder copy",
        note="subprocess cp -r of the same ImageFolder (the yardstick of the at-most-2x-its-time target)")
def convert_cp(path):
    import shutil

    folder = os.path.join(path, "folder")

    def run():
        dst = _scratch()
        try:
            t0, c0 = time.perf_counter(), _cpu_total()
            subprocess.run(["cp", "-r", folder, os.path.join(dst, "folder")], check=True)
            seconds, cpu = time.perf_counter() - t0, _cpu_total() - c0
            records = checksum = 0
            for cls in os.listdir(os.path.join(dst, "folder")):
                files = len(os.listdir(os.path.join(dst, "folder", cls)))
                records += files
                checksum += int(cls.split("_")[1]) * files
            return {"records": records, "checksum": checksum, "seconds": seconds, "cpu_seconds": cpu}
        finally:
            shutil.rmtree(dst, ignore_errors=True)
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


def _cpu_total() -> float:
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


def run_worker(name: str, spec: dict) -> dict:
    """Run one (case, implementation) row. A timed case makes one untimed
    warm-up pass, then ``repeats`` timed ones; a pass whose tally has
    ``seconds`` timed itself (e.g. without the check of its output) and that
    is its time (and ``cpu_seconds`` its CPU time). A measure case (Case.measure) runs once; run() returns
    ``value`` (and optionally ``detail``, ``samples``) instead of a tally."""
    case_name, impl_name = name.split("/", 1)
    c = CASES[case_name]
    impl = c.impls[impl_name]
    SPEC.update(spec)
    _cpu_total()  # imports psutil before any timing
    t0 = time.perf_counter()
    run = impl.make(spec["path"])
    setup = time.perf_counter() - t0
    probe, probe_error = _probe(impl.make, spec["corrupt"]) if c.probe else ("", None)
    expected = spec["expected"]
    extra = {}
    if c.measure:
        gc.collect()
        w0, c0 = time.perf_counter(), _cpu_total()
        out = run()
        walls, cpus = [time.perf_counter() - w0], [_cpu_total() - c0]
        extra = {"value": out["value"], "detail": out.get("detail", ""), "samples": out.get("samples")}
        mid = 0
    else:
        if not spec.get("quick"):  # --quick is a smoke test: no warm-up pass
            tally = run()
            tally.pop("seconds", None), tally.pop("cpu_seconds", None)
            _check(tally, expected)
        walls, cpus = [], []
        for _ in range(spec["repeats"]):
            gc.collect()
            w0, c0 = time.perf_counter(), _cpu_total()
            tally = run()
            wall, cpu = time.perf_counter() - w0, _cpu_total() - c0
            walls.append(tally.pop("seconds", wall))
            cpus.append(tally.pop("cpu_seconds", cpu))
            _check(tally, expected)
        median = statistics.median(walls)
        mid = min(range(len(walls)), key=lambda i: abs(walls[i] - median))
    try:
        import resource
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    except ImportError:  # not on Linux/macOS
        peak_rss_mb = None
    return {"walls": walls, "cpus": cpus, "cpu_util": cpus[mid] / walls[mid], "setup_s": setup,
            "probe": probe, "probe_error": probe_error, "peak_rss_mb": peak_rss_mb, **extra}


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


def _files(path: str) -> list[str]:
    """The file, or every file under the folder."""
    if not os.path.isdir(path):
        return [path]
    return sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names)


def _disk_bytes(path: str) -> int:
    return sum(os.path.getsize(f) for f in _files(path))


def ensure_dataset(ds: Dataset, params: dict, folder: str, log) -> tuple[str, dict]:
    """The data set's file (or folder) and expected tally, built unless a matching one exists."""
    path = os.path.join(folder, ds.name if ds.folder else f"{ds.name}.tfrecord")
    meta_path = os.path.join(folder, f"{ds.name}.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        if (meta["version"] == DATA_VERSION and meta["params"] == params
                and _disk_bytes(path) == meta["file_bytes"]):
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
    expected["file_bytes"] = _disk_bytes(path)
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
    for name in _files(path):
        with open(name, "rb", buffering=0) as f:
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


def pool_rounds(rows: list[dict]) -> dict:
    """One row from the rounds of the same (case, implementation): every timed
    pass pooled; a failure in any round is the row's result."""
    if len(rows) == 1 or "error" in rows[0]:
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


def fmt_throughput(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "% RSS growth":
        value = round(value, 1) + 0.0  # no "-0.0"
    return UNITS[unit][1].format(value)


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
        if r.get("ref") is None:
            this_ours = ours_is = "n/a"
        elif r.get("ref") == r["impl"]:
            this_ours, ours_is = "1.00 (ref)", "1.00 (ref)"
        elif r.get("ours_is") is not None:
            this_ours, ours_is = f"{1 / r['ours_is']:.2f}", f"{r['ours_is']:.2f}x"
        else:
            this_ours = ours_is = "-"
        if r.get("ref") not in (None, "ours", r["impl"]):
            this_ours += f" (vs {r['ref']})"
        note = "; ".join(x for x in (r["note"], r.get("detail"), r.get("probe")) if x)
        lines.append(
            f"| {r['case']} | {r['impl']} | {fmt_throughput(r['throughput'], r['unit'])} | "
            f"{fmt_throughput(r['best'], r['unit'])} | {r['unit']} | {this_ours} | {ours_is} | "
            f"{r['cpu_util']:.2f} | {note.replace('|', '/')} |")
    lines.append("")
    lines.extend(f"- {n}" for n in notes)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Targets (reported, not asserted) and the chart
# --------------------------------------------------------------------------

@dataclass
class Target:
    case: str
    text: str
    row: str
    other: str | None = None  # row / other >= at_least (throughputs); None: the row's own value
    at_least: float | None = None  # ... is >= at_least
    below: float | None = None  # ... or < below


TARGETS = [
    Target("framing_1mib", "ours >= 2 GB/s with CRCs verified", "ours", at_least=2.0),
    Target("parse_small", "ours_batched >= 3x tfrecord", "ours_batched", "tfrecord", at_least=3.0),
    Target("parse_small", "(per-record API) ours >= 3x tfrecord", "ours", "tfrecord", at_least=3.0),
    Target("images", "ours >= 1.3x tf.data", "ours", "tf.data", at_least=1.3),
    Target("images", "ours >= 0.9x the decode-only limit", "ours", "decode-only limit", at_least=0.9),
    Target("images", "(workaround) ours, torchvision imported first >= 1.3x tf.data",
           "ours, torchvision imported first", "tf.data", at_least=1.3),
    Target("images", "(workaround) ours, torchvision imported first >= 0.9x the decode-only limit",
           "ours, torchvision imported first", "decode-only limit", at_least=0.9),
    Target("small_loader", "ours >= 1.0x tf.data batch+parse_example", "ours",
           "tf.data batch+parse_example", at_least=1.0),
    Target("small_loader", "(for comparison) ours num_workers=2 >= 1.0x tf.data batch+parse_example",
           "ours num_workers=2", "tf.data batch+parse_example", at_least=1.0),
    Target("small_loader", "ours >= 10x tfrecord + DataLoader", "ours", "tfrecord + DataLoader",
           at_least=10),
    Target("small_loader", "ours >= 10x tfrecord + DataLoader workers=2", "ours",
           "tfrecord + DataLoader workers=2", at_least=10),
    Target("memory", "RSS growth after epoch 1 < 10%", "ours", below=10.0),
    Target("convert", "ImageFolder conversion takes at most 2x the time of cp -r "
                      "(throughput >= 0.5x cp's)", "ours ImageFolder copy", "cp -r", at_least=0.5),
]


def check_targets(results: list[dict]) -> list[dict]:
    """Each target whose rows ran: its measured value and whether it was met."""
    rows = {(r["case"], r["impl"]): r for r in results if "error" not in r}
    out = []
    for t in TARGETS:
        row = rows.get((t.case, t.row))
        if row is None or (t.other is not None and (t.case, t.other) not in rows):
            continue
        if t.other is not None:
            value = row["throughput"] / rows[(t.case, t.other)]["throughput"]
            met, shown = value >= t.at_least, f"{value:.2f}x"
        else:
            value = row["throughput"]
            met = value >= t.at_least if t.at_least is not None else value < t.below
            shown = fmt_throughput(value, row["unit"]) + f" {row['unit']}"
        out.append({"case": t.case, "target": t.text, "value": value, "shown": shown, "met": bool(met)})
    return out


def render_targets(targets: list[dict]) -> str:
    if not targets:
        return ""
    lines = ["", "Targets (reported, not asserted):", ""]
    lines += [f"- {t['case']}: {t['target']}: {t['shown']} -- {'met' if t['met'] else 'NOT met'}"
              for t in targets]
    return "\n".join(lines) + "\n"


YARDSTICKS = {"baseline: readinto", "decode-only limit", "cp -r"}  # grey in the chart: not peers
TIME_RATIOS = {("convert", "ours ImageFolder copy"): "cp -r",  # row -> the row its note compares times with
               ("convert", "ours png"): "tf writer png"}


def _thousands(v, _pos) -> str:
    return f"{v:,.0f}"


def _plain(v, _pos) -> str:
    return f"{v:g}"


def write_chart(results: list[dict], path: str) -> bool:
    """One panel per case: each row's throughput (the case's unit), ours in
    blue, each bar labelled with its value and its ratio to its reference row."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print("matplotlib is not installed: no chart (pip install matplotlib)", file=sys.stderr)
        return False
    groups: dict[str, list[dict]] = {}
    for r in results:
        if "error" not in r:
            groups.setdefault(r["case"], []).append(r)
    if not groups:
        return False
    heights = [len(rows) + 1.6 for rows in groups.values()]
    fig, axes = plt.subplots(len(groups), 1, figsize=(10, 0.42 * sum(heights) + 0.6),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (name, rows) in zip(axes[:, 0], groups.items()):
        c = CASES[name]
        values = [r["throughput"] for r in rows]
        labels = [r["impl"] for r in rows]
        colours = ["#1f77b4" if r["impl"].startswith("ours") else
                   "#bbbbbb" if r["impl"] in YARDSTICKS else "#ff7f0e" for r in rows]
        y = list(range(len(rows)))[::-1]
        ax.barh(y, values, color=colours, height=0.7)
        ax.set_yticks(y, labels, fontsize=9)
        ax.set_title(f"{c.short}  [{c.unit}]", fontsize=10, loc="left")
        top = max([abs(v) for v in values] + [1e-9])
        lo = min(0.0, min(values))
        ax.set_xlim(lo * 1.15, top * 1.45)
        ax.axvline(0, color="black", linewidth=0.6)
        for yi, r, v in zip(y, rows, values):
            text = fmt_throughput(v, r["unit"])
            if r.get("ref") == r["impl"] and not c.measure:
                text += "  (ref)"
            elif r.get("ours_is"):
                text += f"  ({1 / r['ours_is']:.2f}x {r['ref']})"
            ax.text(max(v, 0) + top * 0.01, yi, text, va="center", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.xaxis.set_major_formatter(FuncFormatter(_thousands if top >= 100 else _plain))
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if c.measure:
            target = next((t.below for t in TARGETS if t.case == name and t.below is not None), None)
            if target is not None:
                ax.axvline(target, color="red", linestyle="--", linewidth=1)
                ax.set_xlim(min(lo * 1.15, -1), max(top, target) * 1.45)
                ax.text(target, 0.25, f" target < {target:g}", color="red", fontsize=8, va="center")
    fig.suptitle("tfrecord_torch benchmarks (blue: ours; orange: peers; grey: ceilings and yardsticks)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small data, 1-2 passes, no warm-up, 2 rows at a time: a smoke test")
    ap.add_argument("--out", default="bench-output", help="folder for data sets and results")
    ap.add_argument("--only", default="", help="comma-separated CASE or CASE/IMPL to run")
    ap.add_argument("--repeats", type=int, help="timed passes per implementation (default per case)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the rows this many times, round-robin, and pool each row's timed passes: "
                         "a slow stretch of a noisy host then falls on every implementation alike")
    ap.add_argument("--jobs", type=int, help="rows run at a time (default 1; 2 with --quick, "
                    "whose numbers are then not measurements)")
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
    scratch = os.path.join(out, "scratch")  # the conversion cases' output, removed after each pass
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(log_dir, exist_ok=True)
    import shutil
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)

    files: dict[str, tuple[str, dict]] = {}
    warm: dict[str, float] = {}
    for name in dict.fromkeys(c.dataset for c, _ in selected):
        ds = DATASETS[name]
        files[name] = ensure_dataset(ds, ds.quick if args.quick else ds.full, data_dir, log)
        warm[name] = warm_page_cache(files[name][0])
    corrupt = os.path.join(data_dir, "corrupt.tfrecord")
    build_corrupt(corrupt)

    timeout = 600 if args.quick else 3600
    jobs = args.jobs or (2 if args.quick else 1)
    if args.rounds > 1 and jobs > 1:
        ap.error("--rounds runs rows one at a time: use it with --jobs 1")

    def run_row(c: Case, impl: Impl) -> dict:
        repeats = 1 if c.measure else args.repeats or (c.quick_repeats if args.quick else c.repeats)
        path, expected = files[c.dataset]
        ds = DATASETS[c.dataset]
        spec = {"path": os.path.abspath(path), "corrupt": os.path.abspath(corrupt),
                "expected": expected, "repeats": repeats, "quick": args.quick,
                "params": ds.quick if args.quick else ds.full, "scratch": os.path.abspath(scratch)}
        name = f"{c.name}/{impl.name}"
        log(f"{name}: running ({'one measurement' if c.measure else f'{repeats} timed passes'}) ...")
        log_path = os.path.join(log_dir, name.replace("/", "__").replace(" ", "_").replace(":", "")
                                .replace("=", "").replace(",", "") + ".log")
        r = run_subprocess(name, spec, log_path, timeout)
        row = {"case": c.name, "impl": impl.name, "unit": c.unit, "note": impl.note,
               "ref": None if c.measure else c.ref_of(impl.name), "repeats": repeats, **r}
        if "error" in r:
            log(f"{name}: FAILED {r['error']}")
            return row
        if c.measure:
            row["throughput"], row["best"] = r["value"], None
        else:
            kind = UNITS[c.unit][0]
            amount = expected["bytes"] / 1e9 if kind == "bytes" else expected["records"]
            row["amount"] = amount
            row["throughput"] = amount / statistics.median(r["walls"])
            row["best"] = amount / min(r["walls"])
        log(f"{name}: {fmt_throughput(row['throughput'], c.unit)} {c.unit} "
            f"(process {r['process_s']:.1f} s)")
        return row

    if jobs > 1:  # rows side by side: a smoke test's speed, not a measurement
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(jobs) as pool:
            results = list(pool.map(lambda ci: run_row(*ci), selected))
    else:
        rounds = [[run_row(c, impl) for c, impl in selected if k == 0 or not c.measure]
                  for k in range(max(args.rounds, 1))]
        results = [pool_rounds([r for rows in rounds for r in rows
                                if (r["case"], r["impl"]) == (first["case"], first["impl"])])
                   for first in rounds[0]]
    shutil.rmtree(scratch, ignore_errors=True)

    by_case = {(r["case"], r["impl"]): r for r in results}
    for r in results:
        ref = by_case.get((r["case"], r["ref"]))
        if not CASES[r["case"]].measure and ref and "error" not in ref and "error" not in r:
            r["ours_is"] = ref["throughput"] / r["throughput"]
    for (case_name, impl_name), other in TIME_RATIOS.items():
        r, o = by_case.get((case_name, impl_name)), by_case.get((case_name, other))
        if r and o and "error" not in r and "error" not in o:
            r["detail"] = f"takes {o['throughput'] / r['throughput']:.2f}x the time of {other}"

    header = {"machine": machine_info(), "command": command_line(), "cwd": os.getcwd(),
              "date": date, "quick": args.quick,
              "loadavg_start": load_start, "loadavg_end": _loadavg()}
    notes = []
    for c in dict.fromkeys(c for c, _ in selected):
        ds = DATASETS[c.dataset]
        params = ds.quick if args.quick else ds.full
        about = files[c.dataset][1].get("about")
        notes.append(f"{c.name}: {c.title}. Data: {ds.describe(params)}"
                     f"{f' ({about})' if about else ''}, "
                     f"{files[c.dataset][1]['file_bytes'] / 1e6:,.1f} MB "
                     f"{'on disk' if ds.folder else 'file'} "
                     f"(page-cache warm-up read: {warm[c.dataset]:.2f} s).")
    if args.rounds > 1:
        notes.append(f"{args.rounds} rounds: the rows ran round-robin {args.rounds} times and each row's "
                     "timed passes were pooled (throughput = median of all of them); the throughput of "
                     "each round is in results.json ('rounds').")
    notes += [
        "Each row ran in its own process: "
        f"{'(--quick: no warm-up pass)' if args.quick else '1 untimed warm-up pass'}, then the timed passes "
        "(throughput = median pass, best = fastest); every pass checked for the right record "
        "count and checksum (the conversion rows: their output, after the timing). GB = 1e9 "
        "payload bytes. The memory row is one measurement (no warm-up; ratio columns n/a).",
        "'ours is N×' = throughput of the reference row (`ours`, or the row named in 'this/ours') "
        "÷ throughput of this row (above 1: the reference is faster); 'this/ours' is its inverse.",
        "CPU = CPU time of the process and its child processes (DataLoader workers, pools) ÷ wall "
        "time in the median pass (1.00 = one core busy).",
        "CRC probe (framing_1mib, parse_small, small_loader): each implementation also read a "
        "10-record file with one flipped bit inside a "
        "float of record 4 (the proto still decodes, only a CRC check can tell).",
    ]
    noisy = [f"{r['case']}/{r['impl']} ({r['other_cores']:.2f})" for r in results
             if (r.get("other_cores") or 0) > 0.1]
    if jobs > 1:
        default = ", the --quick default" if not args.jobs else ""
        notes.append(f"Rows ran {jobs} at a time (--jobs {jobs}{default}): they competed for the "
                     "cores, so these numbers are not measurements.")
    elif noisy:
        notes.append("WARNING: other processes were busy while these rows ran (cores they used "
                     f"on average): {', '.join(noisy)}; their numbers may be low. Rerun on an idle "
                     "machine to compare.")
    else:
        notes.append("Other processes used under 0.1 core during every row (from /proc/stat).")
    targets = check_targets(results)
    chart = os.path.join(out, "results.png")
    if os.path.exists(chart):
        os.remove(chart)
    if write_chart(results, chart):
        notes.append("Chart: results.png (one panel per case, each row's throughput in the case's unit, "
                     "labelled with its ratio to the reference row).")
    table = render(results, header, notes)
    total = time.perf_counter() - started
    table += f"- Total run time: {total:.0f} s.\n"
    table += render_targets(targets)
    print(table)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({**header, "total_s": total, "notes": notes, "results": results, "targets": targets,
                   "datasets": {n: {"path": p, "expected": e} for n, (p, e) in files.items()}},
                  f, indent=1)
    failed = [f"{r['case']}/{r['impl']}" for r in results if "error" in r]
    if failed:
        print(f"FAILED: {', '.join(failed)} (logs in {log_dir})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
