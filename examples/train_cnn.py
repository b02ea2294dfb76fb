"""Convert a torchvision dataset to TFRecord shards, then train a small CNN
for one epoch reading those shards through a DataLoader.

    python examples/train_cnn.py [--out DIR] [--images N] [--workers W]

No download: the source is torchvision's FakeData (swap in CIFAR10(root=...)
for the real thing; the rest does not change).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader

import tfrecord_torch as tt


def model(classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, classes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="example-output/fake")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    source = torchvision.datasets.FakeData(size=args.images, image_size=(3, 32, 32), num_classes=10)
    paths = tt.write_dataset(source, args.out, name="fake", split="train", shards=tt.ShardLayout(size=500),
                             execution=tt.Execution(num_workers=args.workers, progress=False))
    print(f"wrote {len(paths)} shards to {args.out}")

    dataset = tt.tfds_dataset(args.out, "train", shuffle=True, seed=0,
                              transform=lambda d: (d["image"].float() / 255, d["label"]))
    loader = DataLoader(dataset, batch_size=64, num_workers=args.workers)
    net = model(10)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    dataset.set_epoch(0)
    start, seen, total_loss = time.perf_counter(), 0, 0.0
    for images, labels in loader:
        loss = nn.functional.cross_entropy(net(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += len(labels)
        total_loss += loss.item() * len(labels)
    elapsed = time.perf_counter() - start
    assert seen == len(dataset), (seen, len(dataset))
    print(f"epoch 0: {seen} images, mean loss {total_loss / seen:.3f}, {seen / elapsed:.0f} images/s")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
