#!/usr/bin/env python
"""Where case A's CPU goes: the JPEG decoder alone against batch mode's whole pipeline.

    .venv/bin/python benchmarks/decode_cpu.py [--quick] [--out DIR] [--rounds N] [--passes N]

Over case A (the ``images_jpeg`` data set of ``benchmarks/run.py``: 4,000
256x256 JPEGs of 24 KB with a label), in CPU milliseconds per image:

- the decoder alone, on a thread per core (as the pipeline decodes: cores
  that share caches and memory with a busy neighbour decode slower than one
  core alone), over the data set's JPEGs already in memory, each into its
  slot of one preallocated buffer, each thread a contiguous share: ours
  (:func:`~tfrecord_torch.features.images.jpeg.decode_jpegs_into`, one
  GIL-free call), simplejpeg (``decode_jpeg(fastdct=True,
  fastupsample=False, buffer=...)``, an image a call), and, where the
  system has libturbojpeg, ``tjDecompress2`` with one handle for every
  image and ``TJFLAG_FASTDCT | TJFLAG_NOREALLOC``, as FFCV 1.0.2's
  ``libffcv.cpp`` calls it (through ctypes here: a call costs a microsecond
  or two more than from C). All three use libjpeg-turbo's fast IDCT and
  fancy upsampling, and their pixels are checked equal;
- batch mode's pipeline (``TFRecordDataset(path, features=presets.tfds(),
  batch_size=64)`` through ``DataLoader(batch_size=None, num_workers=0)``):
  the CPU time of the whole process (reading, CRCs, parsing, its decode
  threads, the loop) over ``--passes`` passes, per image, and its images/s.
  The pipeline less our decoder alone is what the pipeline costs beyond
  decoding;
- the same pipeline through ``DataLoader(batch_size=None, num_workers=2,
  persistent_workers=True)``, made once: the CPU time of the main process
  and both workers per image (what a row of ``run.py`` with workers pays
  against ``num_workers=0``);
- for both pipelines, the time spent inside the decoder's call
  (:meth:`~tfrecord_torch.features.images.jpeg.JpegClaims.decode`, each
  thread's CPU time, counted in shared memory so workers' count too), per
  image: whether the decoding itself, or the rest, costs more in worker
  processes.

The rows run interleaved over ``--rounds`` rounds (medians, and each round's
value). A pipeline whose CPU per image is C on 2 busy cores reads at most
2 / C images/s, so on a machine whose cores the pipeline fills, a rate
ahead of another pipeline needs a lower C. Prints a Markdown table and
writes DIR/decode_cpu.md (DIR: bench-output).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import datetime
import os
import statistics
import sys
import threading
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.utils.data  # noqa: E402

BATCH = 64
TJPF_RGB, TJFLAG_FASTDCT, TJFLAG_NOREALLOC = 0, 2048, 1024  # turbojpeg.h


class TurboJpeg:
    """libturbojpeg's ``tjDecompress2`` through ctypes: a handle per call of
    :meth:`decode_into` for all its images (a handle is one thread's, as
    FFCV keeps one per thread)."""

    def __init__(self, library: str) -> None:
        self.lib = ctypes.CDLL(library)
        self.lib.tjInitDecompress.restype = ctypes.c_void_p
        self.lib.tjDestroy.argtypes = [ctypes.c_void_p]
        self.lib.tjDecompress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p,
                                           ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]

    def decode_into(self, images: list[bytes], out: np.ndarray) -> None:
        if len(out) != len(images) or not out.flags.c_contiguous or out.dtype != np.uint8 or out.shape[3] != 3:
            raise ValueError("out must be C-contiguous uint8 [len(images), H, W, 3]")
        height, width = out.shape[1:3]
        handle = self.lib.tjInitDecompress()
        if not handle:
            raise RuntimeError("tjInitDecompress failed")
        try:
            call, flags = self.lib.tjDecompress2, TJFLAG_FASTDCT | TJFLAG_NOREALLOC
            base, slot = out.ctypes.data, height * width * 3
            for i, data in enumerate(images):
                if call(handle, data, len(data), base + i * slot, width, 0, height, TJPF_RGB, flags) != 0:
                    raise RuntimeError(f"tjDecompress2 failed on image {i}")
        finally:
            self.lib.tjDestroy(handle)


def decoders(turbo: TurboJpeg | None) -> dict:
    """Each decoder alone: a function (images, out) filling out."""
    import simplejpeg

    from tfrecord_torch.features.images.jpeg import decode_jpegs_into

    def ours(images, out):
        failed = [f for f in decode_jpegs_into(images, out, decoder="fast") if f is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} images failed: {failed[0]}")

    def simple(images, out):
        for i, data in enumerate(images):
            simplejpeg.decode_jpeg(data, "RGB", fastdct=True, fastupsample=False, buffer=out[i])

    rows = {"decoder alone: ours (libjpeg, one GIL-free call a thread)": ours,
            "decoder alone: simplejpeg (its own libjpeg-turbo)": simple}
    if turbo is not None:
        rows["decoder alone: tjDecompress2 (libturbojpeg, as FFCV calls it)"] = turbo.decode_into
    return rows


def cpu_per_image(fill, images: list[bytes], out: np.ndarray, threads: int) -> float:
    """CPU ms per image of the process while ``threads`` threads each fill a
    contiguous share; a thread's error is raised here (no timing of a share
    left undone)."""
    bounds = [len(images) * k // threads for k in range(threads + 1)]
    shares = [(images[lo:hi], out[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]
    errors: list[BaseException] = []

    def run(share_images: list[bytes], share_out: np.ndarray) -> None:
        try:
            fill(share_images, share_out)
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread below
            errors.append(e)

    workers = [threading.Thread(target=run, args=share) for share in shares]
    start = time.process_time()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    return (time.process_time() - start) / len(images) * 1e3


class Pipeline(NamedTuple):
    """One pipeline's round: CPU ms per image (the process and its DataLoader
    workers), of which inside the decoder's call, and its images/s."""

    cpu_ms: float
    decoder_ms: float
    images_per_s: float


class DecoderClock:
    """The CPU time threads spend inside ``JpegClaims.decode``, summed in
    shared memory: DataLoader workers forked after :meth:`install` add
    theirs. (A probe of this benchmark's process, not something the library does.)"""

    def __init__(self) -> None:
        import multiprocessing

        self._total = multiprocessing.Array("d", 1)

    def install(self) -> None:
        from tfrecord_torch.features.images import jpeg

        decode, total = jpeg.JpegClaims.decode, self._total

        def timed(claims, out):
            start = time.thread_time()
            try:
                return decode(claims, out)
            finally:
                with total.get_lock():
                    total[0] += time.thread_time() - start

        jpeg.JpegClaims.decode = timed

    def seconds(self) -> float:
        with self._total.get_lock():
            return self._total[0]


def pipeline(path: str, passes: int, clock: DecoderClock, workers: int = 0) -> Pipeline:
    """Batch mode through a DataLoader with ``workers`` (persistent, made
    once): CPU per image of the process and its workers, of which in the decoder, and images/s."""
    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds(), batch_size=BATCH)
    kept = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                       persistent_workers=True) if workers else None

    def one() -> int:
        n = 0
        for batch in kept if kept is not None else torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0):
            n += int(batch["image"].shape[0])
        return n

    one()  # warm-up: the decode threads' first start, the workers, the page cache
    from benchmarks.loop import _cpu  # this process and its workers, alive or joined

    wall, cpu, decoder, n = time.perf_counter(), _cpu(), clock.seconds(), 0
    for _ in range(passes):
        n += one()
    wall = time.perf_counter() - wall
    cpu, decoder = _cpu() - cpu, clock.seconds() - decoder
    return Pipeline(cpu / n * 1e3, decoder / n * 1e3, n / wall)


MAIN = "pipeline: batch mode, num_workers=0 (whole process)"
WORKERS = "pipeline: batch mode, 2 persistent workers (main process and workers)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: 512 records (measures nothing)")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-output"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=4, help="pipeline passes over the data set per round")
    args = parser.parse_args()
    from benchmarks.harness.report import loadavg
    from benchmarks.loop import _dataset
    from tfrecord_torch import parse_example, read_records
    from tfrecord_torch.features.images.limits import read_header

    path = _dataset(args.out, args.quick, lambda *a: None)
    images = [parse_example(r)["image"][0] for r in read_records(path)]
    library = ctypes.util.find_library("turbojpeg")
    turbo = TurboJpeg(library) if library else None
    rows = decoders(turbo)
    cores = len(os.sched_getaffinity(0))
    started, load_start = datetime.datetime.now(datetime.timezone.utc), loadavg()
    size = read_header(images[0])
    outs = {name: np.empty((len(images), size.height, size.width, 3), np.uint8) for name in rows}
    for name, fill in rows.items():  # warm-up and the pixels' check
        fill(images, outs[name])
    first = next(iter(outs.values()))
    same = {name: bool(np.array_equal(first, out)) for name, out in outs.items()}
    clock = DecoderClock()
    clock.install()  # before the workers fork
    samples: dict[str, list[float]] = {name: [] for name in rows}
    runs: dict[str, list[Pipeline]] = {MAIN: [], WORKERS: []}
    for r in range(args.rounds):
        order = list(rows) if r % 2 == 0 else list(reversed(rows))
        for name in order:
            samples[name].append(cpu_per_image(rows[name], images, outs[name], cores))
        for name in (runs if r % 2 == 0 else reversed(runs)):
            runs[name].append(pipeline(path, args.passes, clock, workers=2 if name == WORKERS else 0))
    for name, rounds in runs.items():
        samples[name] = [p.cpu_ms for p in rounds]
    ours = statistics.median(samples[next(iter(rows))])
    lines = [
        f"Command: `.venv/bin/python benchmarks/decode_cpu.py{' --quick' if args.quick else ''} "
        f"--rounds {args.rounds} --passes {args.passes}`, "
        f"started {started:%Y-%m-%d %H:%M:%S} UTC; 1-min load average at start / end: {load_start} / {loadavg()}",
        "",
        "| row | CPU ms an image (median) | each round | against ours alone |",
        "|---|---:|---|---:|",
    ]
    for name, values in samples.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.4f} | {', '.join(f'{v:.4f}' for v in values)} | {median / ours:.3f}x |")
    pipe = statistics.median(samples[MAIN])

    def med(name: str, field: str) -> float:
        return statistics.median(getattr(p, field) for p in runs[name])

    lines += [
        "",
        f"- {len(images):,} JPEGs of {sum(map(len, images)) / len(images) / 1e3:.1f} KB; the decoders' pixels "
        f"equal: {all(same.values())}; the decoders on {cores} threads"
        + ("" if turbo is not None else "; libturbojpeg not found, its row left out") + ".",
        f"- The pipeline read {med(MAIN, 'images_per_s'):,.0f} images/s (median of the rounds' "
        f"{args.passes}-pass rates); beyond our decoder alone it costs {pipe - ours:.4f} ms an image "
        f"({(pipe - ours) * BATCH:.2f} ms a batch of {BATCH}, {(pipe - ours) / pipe:.1%} of its CPU).",
        f"- With 2 persistent workers it read {med(WORKERS, 'images_per_s'):,.0f} images/s "
        f"({med(WORKERS, 'images_per_s') / med(MAIN, 'images_per_s'):.2f}x num_workers=0; by round: "
        + ", ".join(f"{w.images_per_s / m.images_per_s:.2f}x" for w, m in zip(runs[WORKERS], runs[MAIN]))
        + ").",
        "- Inside the decoder's call (each thread's CPU time, per image): "
        f"{med(MAIN, 'decoder_ms'):.4f} ms with num_workers=0, {med(WORKERS, 'decoder_ms'):.4f} with 2 persistent "
        f"workers ({med(WORKERS, 'decoder_ms') / med(MAIN, 'decoder_ms'):.3f}x); the rest of each pipeline "
        f"{med(MAIN, 'cpu_ms') - med(MAIN, 'decoder_ms'):.4f} against "
        f"{med(WORKERS, 'cpu_ms') - med(WORKERS, 'decoder_ms'):.4f} ms an image.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "decode_cpu.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
