"""Shards as a TF team writes them, for the journeys that start from them."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

DESCRIPTION = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


def write_tf_team_shards(folder, shards: int, per_shard: int, *, split: str = "train", first: int = 0) -> None:
    """``shards`` files ``<split>-SSSSS-of-NNNNN`` in ``folder`` written by
    tf.io.TFRecordWriter: JPEGs of mixed sizes (20-39 pixels a side) under
    ``image/encoded``, and ``image/class/label`` first, first + 1, ... in file order."""
    rng = np.random.default_rng(first)
    label = first
    for s in range(shards):
        with tf.io.TFRecordWriter(str(folder / f"{split}-{s:05d}-of-{shards:05d}")) as w:
            for _ in range(per_shard):
                h, wd = int(rng.integers(20, 40)), int(rng.integers(20, 40))
                jpeg = tf.io.encode_jpeg(rng.integers(0, 256, (h, wd, 3), dtype=np.uint8)).numpy()
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                })).SerializeToString())
                label += 1
