"""The TensorFlow side: read the shards tfrecord_torch wrote, with tf.data and
with TFDS, and check they agree with the PyTorch side.

    python examples/read_with_tensorflow.py DIR

DIR is a folder written by ``write_dataset`` / ``tfrecord-torch convert``
(for example the one examples/train_cnn.py leaves in example-output/fake).
"""

from __future__ import annotations

import glob
import os
import re
import sys

import torchvision  # noqa: F401  (load before TensorFlow; see the README)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402

import tfrecord_torch as tt  # noqa: E402

# The schema every converted record has (see the README).
FEATURE_DESCRIPTION = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "format": tf.io.FixedLenFeature([], tf.string),
    "height": tf.io.FixedLenFeature([], tf.int64),
    "width": tf.io.FixedLenFeature([], tf.int64),
    "channels": tf.io.FixedLenFeature([], tf.int64),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


def parse(record):
    example = tf.io.parse_single_example(record, FEATURE_DESCRIPTION)
    return tf.io.decode_image(example["image"], channels=3, expand_animations=False), example["label"]


def main(directory: str) -> None:
    # the shards only: index files and their stamps (.index, .index.json) sit beside them
    files = sorted(f for f in glob.glob(os.path.join(directory, "*-train.tfrecord-*"))
                   if re.search(r"-\d{5}-of-\d{5}$", f))
    with_tf = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(64)
    count = sum(int(labels.shape[0]) for _, labels in with_tf)
    print(f"tf.data: {count} records in {len(files)} shards")

    builder = tfds.builder_from_directory(directory)
    split = builder.info.splits["train"]
    print(f"TFDS: {builder.info.name}, train has {split.num_examples} examples, "
          f"features {list(builder.info.features.keys())}")
    first_tfds = next(iter(builder.as_dataset(split="train", shuffle_files=False)))

    ours = next(iter(tt.tfds_dataset(directory, "train")))
    same = (ours["image"].permute(1, 2, 0).numpy() == first_tfds["image"].numpy()).all()
    print(f"first image identical in TFDS and tfrecord_torch: {bool(same)}")
    assert count == split.num_examples == len(tt.tfds_dataset(directory, "train")) and same


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "example-output/fake")
