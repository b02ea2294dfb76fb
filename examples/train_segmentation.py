"""Train a tiny segmentation model for one step from records TensorFlow wrote.

    python examples/train_segmentation.py [--out DIR] [--records N]

TensorFlow writes the classic layout (``height``, ``width``, ``image_raw`` HWC
RGB bytes, ``mask_raw`` HW class-id bytes; images of different sizes);
``presets.segmentation_raw()`` reads it as ``tv_tensors.Image`` + ``Mask``, v2
transforms resize and flip image and mask alike (nearest-neighbour for the
mask), and ``pad_collate`` pads masks with 255, which the loss ignores.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
import torchvision  # noqa: F401  before TensorFlow: loading it after TF can crash
from torch import nn
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

import tfrecord_torch as tt

CLASSES = 3  # background, disc, square


def write_with_tensorflow(path: str, records: int) -> None:
    """Synthetic scenes (a disc and a square on noise) as TensorFlow's writer writes them."""
    import tensorflow as tf

    rng = np.random.default_rng(0)

    def feature(value):
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(records):
            h, w = (int(x) for x in rng.integers(40, 72, 2))
            image = rng.integers(0, 60, (h, w, 3), dtype=np.uint8)
            mask = np.zeros((h, w), np.uint8)
            yy, xx = np.mgrid[:h, :w]
            cy, cx, r = rng.integers(10, h - 10), rng.integers(10, w - 10), 8
            mask[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = 1
            top, left = rng.integers(0, h - 12), rng.integers(0, w - 12)
            mask[top:top + 12, left:left + 12] = 2
            image[mask == 1] = (220, 40, 40)
            image[mask == 2] = (40, 40, 220)
            example = tf.train.Example(features=tf.train.Features(feature={
                "height": feature(h), "width": feature(w),
                "image_raw": feature(image.tobytes()), "mask_raw": feature(mask.tobytes())}))
            writer.write(example.SerializeToString())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="example-output/segmentation")
    parser.add_argument("--records", type=int, default=8)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "scenes.tfrecord")
    write_with_tensorflow(path, args.records)

    transform = v2.Compose([
        v2.RandomResize(40, 64),  # images and masks of different sizes in one batch
        v2.RandomHorizontalFlip(),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
    ])
    dataset = tt.TFRecordDataset(path, features=tt.presets.segmentation_raw(), transform=transform)
    loader = DataLoader(dataset, batch_size=4, collate_fn=tt.pad_collate)  # masks padded with 255
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, CLASSES, 1))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    batch = next(iter(loader))
    images, masks = batch["image"], batch["mask"].long()
    loss = nn.functional.cross_entropy(net(images), masks, ignore_index=255)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    padded = (masks == 255).float().mean().item()
    print(f"batch: images {tuple(images.shape)}, masks {tuple(masks.shape)} ({padded:.0%} padding ignored)")
    print(f"step 1: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
