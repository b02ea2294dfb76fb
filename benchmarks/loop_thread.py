#!/usr/bin/env python
"""The loop thread's own CPU time per record and per batch, per sample with ``num_workers=0``.

    .venv/bin/python benchmarks/loop_thread.py PATH [--rounds N]

With ``num_workers=0`` the records decode on the main process's decode
threads, but taking each one from them, the DataLoader's fetch and the
collate run on the loop's thread, between two steps: that time is a floor
under the wait in ``next()`` that no read-ahead hides. Over the TFRecord
file PATH (Examples with an ``image`` JPEG and a ``label``,
``features=presets.tfds()``), each round measures, in this process:

- per record: ``iter(ds)``, 200 records not counted, then 8 times a 0.4 s
  pause (the decode threads fill the records held ahead) and 300 records
  taken, timed by the thread's CPU clock;
- per batch: ``DataLoader(ds, batch_size=64, num_workers=0)`` for 2 epochs
  with a 0.12 s sleep (``--step``) after each batch (the decode threads ahead), the
  thread's CPU time in each ``next()`` (10th percentile and median; the
  first 3 batches of each epoch not counted) and its wall time (median);
- batch mode, for comparison: ``DataLoader(TFRecordDataset(PATH, ...,
  batch_size=64), batch_size=None)`` timed as per batch above, each
  ``next()``'s CPU (median) and wall time (median and mean). With the step
  longer than the loader's time per batch every batch is ready when taken,
  so wall above CPU is time the loop's thread waited for the GIL while the
  producer thread started its next batch;
- the floor of torch's DataLoader itself: the same DataLoader over a
  generator of ready items (a view of one buffer and a label each, made
  before the timing: a view is made where a record is decoded), its
  collate handing the images over and stacking the labels as
  default_collate does; timed after each step's sleep, as above, and back
  to back with no sleep. The two differ by what a sleep costs the thread
  that wakes from it: caches and predictors that other work (here, the
  decode threads and the machine's other tenants) took over meanwhile.

To compare two trees, run it in each (``PYTHONPATH=TREE``) in turn.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BATCH = 64


def per_record(ds, records: int) -> float:
    """Microseconds of the thread's CPU per record taken with the decode threads ahead."""
    chunks = min(8, (records - 200) // 300)
    if chunks < 1:
        raise SystemExit(f"the file holds {records} records; this needs 500 or more")
    it = iter(ds)
    for _ in range(200):
        next(it)
    cpu, n = 0.0, 0
    for _ in range(chunks):
        time.sleep(0.4)
        c0 = time.thread_time()
        for _ in range(300):
            next(it)
        cpu += time.thread_time() - c0
        n += 300
    it.close()
    return 1e6 * cpu / n


class Batches(NamedTuple):
    """Milliseconds per ``next()``."""

    cpu_p10: float
    cpu_p50: float
    wall_p50: float
    wall_mean: float


def per_batch(loader, step_s: float, epochs: int = 2) -> Batches:
    """The CPU and wall time of each ``next()`` (the first 3 of each epoch not counted)."""
    cpus, walls = [], []
    for _ in range(epochs):
        for k, (cpu, wall) in enumerate(_timed_batches(loader, step_s)):
            if k >= 3:
                cpus.append(cpu)
                walls.append(wall)
    cpus.sort()
    return Batches(1e3 * cpus[len(cpus) // 10], 1e3 * statistics.median(cpus), 1e3 * statistics.median(walls),
                   1e3 * statistics.fmean(walls))


def _timed_batches(loader, step_s: float):
    it = iter(loader)
    while True:
        c0, w0 = time.thread_time(), time.perf_counter()
        try:
            next(it)
        except StopIteration:
            return
        yield time.thread_time() - c0, time.perf_counter() - w0
        time.sleep(step_s)


def floor_loader(records: int):
    """torch's DataLoader over ready items: its own fetch, and the labels' stack."""
    import torch
    import torch.utils.data as tud

    images = torch.zeros(BATCH, 3, 256, 256, dtype=torch.uint8)
    # made before: a view of the buffer is made per record by whoever decodes it, not by the loop's thread
    ready = [{"image": images[k], "label": torch.tensor(k)} for k in range(BATCH)]

    class Ready(tud.IterableDataset):
        def __iter__(self):
            for k in range(records):
                yield ready[k % BATCH]

    def collate(batch):
        return {"image": images, "label": tud.default_collate([b["label"] for b in batch])}

    return tud.DataLoader(Ready(), batch_size=BATCH, collate_fn=collate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--step", type=float, default=0.12, help="seconds slept after each batch")
    args = parser.parse_args()
    import torch.utils.data
    import torchvision.io  # noqa: F401 - imported as the other benchmarks do

    import tfrecord_torch
    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(args.path, features=presets.tfds())
    batched = TFRecordDataset(args.path, features=presets.tfds(), batch_size=BATCH)
    records = len(ds)
    print(f"tfrecord_torch from {os.path.dirname(os.path.dirname(tfrecord_torch.__file__))}; "
          f"load average before {os.getloadavg()[0]:.2f}")
    print("| round | us a record (CPU) | ms a batch: CPU p10, p50 | wall p50 | batch mode: CPU p50, wall p50, mean "
          "| DataLoader floor: CPU p50 after a step, back to back |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in range(1, args.rounds + 1):
        record = per_record(ds, records)
        sample = per_batch(torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=0), args.step)
        batch = per_batch(torch.utils.data.DataLoader(batched, batch_size=None, num_workers=0), args.step)
        floor = per_batch(floor_loader(min(records, 24 * BATCH)), args.step, epochs=1)
        hot = per_batch(floor_loader(min(records, 24 * BATCH)), 0.0, epochs=1)
        print(f"| {r} | {record:.1f} | {sample.cpu_p10:.2f}, {sample.cpu_p50:.2f} | {sample.wall_p50:.2f} "
              f"| {batch.cpu_p50:.2f}, {batch.wall_p50:.2f}, {batch.wall_mean:.2f} "
              f"| {floor.cpu_p50:.2f}, {hot.cpu_p50:.3f} |")
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
