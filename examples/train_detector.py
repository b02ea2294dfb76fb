"""Train a tiny detector for one step from TF Object Detection API records.

    python examples/train_detector.py [--out DIR] [--records N]

TensorFlow writes records with the OD API's keys (``image/encoded`` JPEG,
``image/height``/``width``, ``image/object/bbox/xmin|ymin|xmax|ymax``
normalised, ``image/object/class/label|text``); ``presets.object_detection()``
reads them as ``tv_tensors.Image`` + ``BoundingBoxes`` in pixels, v2
transforms flip and resize boxes with their image, and ``detection_collate``
gives torchvision's detection models their lists of images and targets.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
import torchvision  # noqa: F401  before TensorFlow: loading it after TF can crash
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

import tfrecord_torch as tt

NAMES = {1: b"square", 2: b"bar"}


def write_with_tensorflow(path: str, records: int) -> None:
    """Scenes of bright rectangles, written by TensorFlow with the OD API's keys."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    floats = lambda v: tf.train.Feature(float_list=tf.train.FloatList(value=v))  # noqa: E731
    ints = lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v))  # noqa: E731
    strings = lambda v: tf.train.Feature(bytes_list=tf.train.BytesList(value=v))  # noqa: E731
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(records):
            h, w = (int(x) for x in rng.integers(96, 160, 2))
            image = rng.integers(0, 40, (h, w, 3), dtype=np.uint8)
            boxes, labels = [], []
            for _ in range(int(rng.integers(1, 4))):
                label = int(rng.integers(1, 3))
                bh, bw = (20, 20) if label == 1 else (12, 40)
                y, x = int(rng.integers(0, h - bh)), int(rng.integers(0, w - bw))
                image[y:y + bh, x:x + bw] = 200
                boxes.append((x / w, y / h, (x + bw) / w, (y + bh) / h))
                labels.append(label)
            xmin, ymin, xmax, ymax = (list(c) for c in zip(*boxes))
            example = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": strings([tf.io.encode_jpeg(image, quality=90).numpy()]),
                "image/format": strings([b"jpeg"]), "image/height": ints([h]), "image/width": ints([w]),
                "image/object/bbox/xmin": floats(xmin), "image/object/bbox/ymin": floats(ymin),
                "image/object/bbox/xmax": floats(xmax), "image/object/bbox/ymax": floats(ymax),
                "image/object/class/label": ints(labels),
                "image/object/class/text": strings([NAMES[label] for label in labels])}))
            writer.write(example.SerializeToString())


def tiny_faster_rcnn(classes: int) -> torch.nn.Module:
    """torchvision's Faster R-CNN on a two-layer backbone: the real detection
    heads and losses, small enough to train a step on a CPU in a blink."""
    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.ops import MultiScaleRoIAlign

    backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
                                   torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU())
    backbone.out_channels = 32
    return FasterRCNN(backbone, num_classes=classes, min_size=160, max_size=160,
                      rpn_anchor_generator=AnchorGenerator(((16, 32, 64),), ((0.5, 1.0, 2.0),)),
                      box_roi_pool=MultiScaleRoIAlign(["0"], output_size=7, sampling_ratio=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="example-output/detection")
    parser.add_argument("--records", type=int, default=4)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "scenes.tfrecord")
    write_with_tensorflow(path, args.records)

    transform = v2.Compose([
        v2.RandomHorizontalFlip(),
        v2.RandomZoomOut(fill={tv_tensors.Image: 0, "others": 0}, side_range=(1.0, 1.5)),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
        v2.SanitizeBoundingBoxes(),  # drops degenerate boxes and their labels
    ])
    dataset = tt.TFRecordDataset(path, features=tt.presets.object_detection(), transform=transform)
    loader = DataLoader(dataset, batch_size=args.records, collate_fn=tt.detection_collate)
    model = tiny_faster_rcnn(classes=len(NAMES) + 1)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, targets = next(iter(loader))
    losses = model(images, [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets])
    loss = sum(losses.values())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"batch: {len(images)} images, boxes per image {[len(t['boxes']) for t in targets]}, "
          f"classes {sorted({name for t in targets for name in t['text']})}")
    print(f"step 1: loss {loss.item():.3f} ({', '.join(sorted(losses))})")


if __name__ == "__main__":
    main()
