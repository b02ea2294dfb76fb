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
- the floor of torch's DataLoader itself: the same DataLoader over a
  generator of ready items (a view of one buffer and a label each), its
  collate handing the images over and stacking the labels as
  default_collate does.

To compare two trees, run it in each (``PYTHONPATH=TREE``) in turn.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

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


def per_batch(loader, step_s: float, epochs: int = 2) -> tuple[float, float, float]:
    """Milliseconds per ``next()``: CPU p10, CPU p50, wall p50."""
    cpus, walls = [], []
    for _ in range(epochs):
        for k, (cpu, wall) in enumerate(_timed_batches(loader, step_s)):
            if k >= 3:
                cpus.append(cpu)
                walls.append(wall)
    cpus.sort()
    return 1e3 * cpus[len(cpus) // 10], 1e3 * statistics.median(cpus), 1e3 * statistics.median(walls)


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
    labels = [torch.tensor(i) for i in range(BATCH)]

    class Ready(tud.IterableDataset):
        def __iter__(self):
            for k in range(records):
                yield {"image": images[k % BATCH], "label": labels[k % BATCH]}

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
    records = len(ds)
    print(f"tfrecord_torch from {os.path.dirname(os.path.dirname(tfrecord_torch.__file__))}; "
          f"load average before {os.getloadavg()[0]:.2f}")
    print("| round | us a record (CPU) | ms a batch: CPU p10, p50 | wall p50 | DataLoader floor: CPU p50 |")
    print("|---:|---:|---:|---:|---:|")
    for r in range(1, args.rounds + 1):
        record = per_record(ds, records)
        p10, p50, wall = per_batch(torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=0), args.step)
        _, floor, _ = per_batch(floor_loader(min(records, 24 * BATCH)), args.step, epochs=1)
        print(f"| {r} | {record:.1f} | {p10:.2f}, {p50:.2f} | {wall:.2f} | {floor:.2f} |")
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
