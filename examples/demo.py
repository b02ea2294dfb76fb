"""The main job on built-in sample data: no download needed.

1. Convert a torchvision dataset (FakeData: generated images) to TFDS-style
   sharded TFRecords with indexes and metadata.
2. Check and describe them with the ``tfrecord-torch`` command line.
3. Train-style reading: a shuffled TFRecordDataset through a DataLoader with
   2 workers (every record once), a batch-mode pass, random access by index.

Run it with ``bash dev.sh demo`` (or ``python examples/demo.py [OUTPUT_DIR]``).
"""

from __future__ import annotations

import os
import sys
import time

import torchvision
from torch.utils.data import DataLoader

import tfrecord_torch as tt
from tfrecord_torch.cli import main as cli


def main(out: str = "demo-output") -> int:
    out = os.path.join(out, "fake")
    source = torchvision.datasets.FakeData(size=1000, image_size=(3, 64, 64), num_classes=10)
    start = time.perf_counter()
    paths = tt.write_dataset(source, out, name="fake", split="train", shards=tt.ShardLayout(size=250),
                             execution=tt.Execution(num_workers=2, progress=False))
    print(f"converted {len(source)} FakeData images into {len(paths)} shards in "
          f"{time.perf_counter() - start:.1f}s: {out}/\n")

    for argv in (["verify", os.path.join(out, "*.tfrecord-*-of-*")],
                 ["inspect", "--limit", "200", paths[0]],
                 ["head", "-n", "1", "--bytes", "length", paths[0]]):
        print("$ tfrecord-torch " + " ".join(argv))
        status = cli(argv)
        print()
        if status:
            return status

    dataset = tt.tfds_dataset(out, "train", shuffle=True, seed=0)
    dataset.set_epoch(0)
    start, labels = time.perf_counter(), []
    for batch in DataLoader(dataset, batch_size=64, num_workers=2):
        labels.extend(batch["label"].tolist())
    rate = len(labels) / (time.perf_counter() - start)
    print(f"DataLoader (2 workers, shuffled): {len(labels)} images of shape "
          f"{tuple(batch['image'].shape[1:])}, {rate:.0f} images/s; every record once: "
          f"{len(labels) == len(dataset)}")

    batched = tt.tfds_dataset(out, "train", batch_size=250)
    shapes = [tuple(b["image"].shape) for b in DataLoader(batched, batch_size=None, num_workers=2)]
    print(f"batch mode: {len(shapes)} batches of {shapes[0]}")

    indexed = tt.tfds_dataset(out, "train", map_style=True)
    item = indexed[777]
    k = int(tt.write_order(len(source))[777])  # the converter wrote the samples in this seeded order
    print(f"random access: record 777 (source sample {k}) has label {int(item['label'])} "
          f"(source says {source[k][1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
