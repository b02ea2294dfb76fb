#!/usr/bin/env python
"""Where the image pipeline's time goes between decoding and the main process.

    .venv/bin/python benchmarks/transfer.py [--out DIR]

Uses the JPEG data set that ``benchmarks/run.py`` writes (DIR/data/images_jpeg.tfrecord,
DIR defaults to bench-output) and times, on the same 2 DataLoader workers and
batches of 64:

* workers that decode each batch and send nothing back (the decode-side cost);
* workers that also stack each batch into a fresh shared-memory tensor, as the
  DataLoader's collate does, but still send nothing;
* the full pipeline (default collate, batches reach the main process);

and in one process, the cost of a fresh shared-memory tensor of one batch's
size against an ordinary one. A diagnostic, not a comparison with peers:
benchmarks/run.py is the benchmark.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)


def _count(batch) -> int:
    return len(batch)


def _stack_shared(batch) -> int:
    import torch

    images = [item["image"] for item in batch]
    out = torch.empty((len(images),) + tuple(images[0].shape), dtype=torch.uint8).share_memory_()
    torch.stack(images, out=out)
    return len(batch)


def _loader_rate(dataset, collate, passes: int = 3) -> float:
    from torch.utils.data import DataLoader

    best = 0.0
    for _ in range(passes):
        start = time.perf_counter()
        n = 0
        for batch in DataLoader(dataset, batch_size=64, num_workers=2, collate_fn=collate):
            n += batch if isinstance(batch, int) else len(batch["label"])
        best = max(best, n / (time.perf_counter() - start))
    return best


def _alloc_ms(make, touch: bool, repeats: int = 20) -> float:
    import torch

    source = torch.ones(64 * 3 * 256 * 256, dtype=torch.uint8)
    start = time.perf_counter()
    for _ in range(repeats):
        t = make(source.numel())
        if touch:
            t.copy_(source)
        del t
    return (time.perf_counter() - start) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-output"))
    args = parser.parse_args()
    path = os.path.join(args.out, "data", "images_jpeg.tfrecord")
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: run benchmarks/run.py --only images first")
    import torch
    import torchvision.io  # noqa: F401 - imported before the workers fork

    from tfrecord_torch import TFRecordDataset, presets

    ds = TFRecordDataset(path, features=presets.tfds())
    rows = [("workers decode, send nothing", _loader_rate(ds, _count)),
            ("+ stack into fresh shared memory, send nothing", _loader_rate(ds, _stack_shared)),
            ("full pipeline (default collate)", _loader_rate(ds, None))]
    fresh = lambda n: torch.empty(n, dtype=torch.uint8)  # noqa: E731
    shared = lambda n: torch.empty(n, dtype=torch.uint8).share_memory_()  # noqa: E731
    allocs = [("ordinary tensor", _alloc_ms(fresh, False), _alloc_ms(fresh, True)),
              ("shared-memory tensor", _alloc_ms(shared, False), _alloc_ms(shared, True))]
    print(f"Command: `.venv/bin/python benchmarks/transfer.py`; {os.cpu_count()} cores; "
          f"4,000 256x256 JPEGs, DataLoader(batch_size=64, num_workers=2), best of 3 passes\n")
    print("| pipeline | images/s |\n|---|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} |")
    print("\n| one batch (12.6 MB) | allocate, ms | allocate + fill, ms |\n|---|---:|---:|")
    for name, bare, filled in allocs:
        print(f"| {name} | {bare:.2f} | {filled:.2f} |")


if __name__ == "__main__":
    main()
