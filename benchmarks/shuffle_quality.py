"""How well shuffling mixes class-sorted shards: mean distinct labels per batch.

Writes a class-sorted dataset (as ``write_dataset(..., shuffle=False)`` of a
torchvision dataset gives: label = record number // per_class) into shards,
reads it with each shuffle mode and reports the mean number of distinct
labels per batch, and its ratio to a true uniform permutation's::

    PYTHONPATH=. python benchmarks/shuffle_quality.py [--records 50000 --classes 100 --shards 16 --batch 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfrecord_torch import Int64, RecordWriter, Shuffling, TFRecordDataset, make_example  # noqa: E402


def mean_distinct(labels, batch: int) -> float:
    n = len(labels) // batch * batch
    return float(np.mean([len(np.unique(row)) for row in np.asarray(labels[:n]).reshape(-1, batch)]))


def write(folder: str, records: int, shards: int, compression) -> None:
    bounds = np.linspace(0, records, shards + 1).astype(int)
    suffix = ".gz" if compression else ""
    for s in range(shards):
        with RecordWriter(os.path.join(folder, f"data-{s:05d}.tfrecord{suffix}"), compression=compression) as w:
            for i in range(bounds[s], bounds[s + 1]):
                w.write(make_example({"id": i}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    per_class = args.records // args.classes

    def labels_of(ds) -> list[int]:
        return [int(item["id"]) // per_class for item in ds]

    rng = np.random.default_rng(0)
    true = np.mean([mean_distinct(rng.permutation(args.records) // per_class, args.batch) for _ in range(5)])
    rows = [("true permutation (numpy)", true)]
    with tempfile.TemporaryDirectory() as plain, tempfile.TemporaryDirectory() as packed:
        write(plain, args.records, args.shards, None)
        write(packed, args.records, args.shards, "gzip")
        spec = {"id": Int64()}
        rows.append(("no shuffle", mean_distinct(labels_of(TFRecordDataset(plain, features=spec)), args.batch)))
        for block in (1, 4, 16):
            ds = TFRecordDataset(plain, features=spec, shuffle=Shuffling(block=block))
            rows.append((f"indexed, shuffle_block={block}", mean_distinct(labels_of(ds), args.batch)))
        for cycle, buffer in ((1, 10_000), (4, 0), (4, 1_000), (4, 10_000), (16, 10_000)):
            ds = TFRecordDataset(packed, features=spec, shuffle=Shuffling(cycle_length=cycle, buffer=buffer))
            rows.append((f"streamed, cycle_length={cycle}, shuffle_buffer={buffer}",
                         mean_distinct(labels_of(ds), args.batch)))
    print(f"{args.records} records, {args.classes} classes sorted, {args.shards} shards, batch {args.batch}")
    print("| reading | distinct labels per batch | ratio to a true permutation |")
    print("|---|---|---|")
    for name, value in rows:
        print(f"| {name} | {value:.2f} | {value / true:.3f} |")


if __name__ == "__main__":
    main()
