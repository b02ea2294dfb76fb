"""Multi-process training with torchrun (gloo on CPU), each rank reading its
own part of the shards.

    python examples/torchrun_ddp.py --prepare DIR        # write sample shards once
    torchrun --nproc-per-node 2 examples/torchrun_ddp.py DIR

TFRecordDataset takes the rank and world size from torch.distributed, splits
the records so each is read once per epoch over all ranks and workers, and
with even="pad" gives every rank the same number of batches, which
DistributedDataParallel needs (unequal counts hang it).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torchvision
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import tfrecord_torch as tt


def prepare(directory: str) -> None:
    source = torchvision.datasets.FakeData(size=600, image_size=(3, 32, 32), num_classes=10)
    tt.write_dataset(source, directory, name="fake", shards=tt.ShardLayout(size=150),
                     execution=tt.Execution(progress=False))
    print(f"wrote sample shards to {directory}")


def train(directory: str, epochs: int) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = tt.tfds_dataset(directory, "train", shuffle=True, seed=0, sharding=tt.Sharding(even="pad"),
                              transform=lambda d: (d["image"].float() / 255, d["label"]))
    loader = DataLoader(dataset, batch_size=32, num_workers=1)
    net = DistributedDataParallel(nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        seen = 0
        for images, labels in loader:
            loss = nn.functional.cross_entropy(net(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += len(labels)
        counts = [torch.tensor(0) for _ in range(world)]
        dist.all_gather(counts, torch.tensor(seen))
        if rank == 0:
            print(f"epoch {epoch}: records per rank {[int(c) for c in counts]}, last loss {loss.item():.3f}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", nargs="?", default="example-output/ddp")
    parser.add_argument("--prepare", action="store_true", help="write the sample shards and exit")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    if args.prepare:
        prepare(args.directory)
    else:
        train(args.directory, args.epochs)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
