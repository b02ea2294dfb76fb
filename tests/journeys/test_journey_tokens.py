"""T5-style Examples as TensorFlow writes them (int64 token lists under
``inputs`` and ``targets``), packed the way docs/guide/tokens.md shows and
compared with seqio's packing rule run by tf.data on the same file
(benchmarks/seqio_pack.py), and padded as tf.data's padded_batch pads them."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf
import torch
from torch.utils.data import DataLoader

from benchmarks.seqio_pack import trim_and_pack
from tfrecord_torch import Int64, TFRecordDataset, pack_collate, pad_collate

DESCRIPTION = {"inputs": tf.io.VarLenFeature(tf.int64), "targets": tf.io.VarLenFeature(tf.int64)}


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    """150 examples: inputs of 0-90 tokens (some past the row), targets of 1-20, EOS (1) last, no 0."""
    path = tmp_path_factory.mktemp("t5") / "c4-train.tfrecord-00000-of-00001"
    rng = np.random.default_rng(9)
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(150):
            lists = {"inputs": [*rng.integers(2, 32100, int(rng.integers(0, 90))), 1] if i % 17 else [],
                     "targets": [*rng.integers(2, 32100, int(rng.integers(0, 20))), 1]}
            w.write(tf.train.Example(features=tf.train.Features(feature={
                k: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in lists.items()}))
                .SerializeToString())
    return str(path)


def _tf_examples(path):
    return tf.data.TFRecordDataset(path).map(
        lambda r: {k: tf.sparse.to_dense(v) for k, v in tf.io.parse_single_example(r, DESCRIPTION).items()})


def _dataset(path):
    return TFRecordDataset(path, features={"inputs": Int64(shape=None), "targets": Int64(shape=None)})


def test_packed_rows_equal_seqio_rule(tokens):
    lengths = {"inputs": 64, "targets": 16}
    loader = DataLoader(_dataset(tokens), batch_size=max(lengths.values()),
                        collate_fn=functools.partial(pack_collate, lengths=lengths))
    got = {name: torch.cat([rows[name] for rows in loader]).numpy()
           for name in next(iter(loader))}
    want = list(trim_and_pack(_tf_examples(tokens), lengths).as_numpy_iterator())
    assert len(got["inputs"]) == len(want) > 150 * 50 // 64 // 2
    assert sorted(got) == sorted(want[0])
    for name in got:
        np.testing.assert_array_equal(got[name], np.stack([row[name] for row in want]), err_msg=name)


def test_padded_batches_equal_padded_batch(tokens):
    collate = functools.partial(pad_collate, sequences=["inputs", "targets"])
    got = list(DataLoader(_dataset(tokens), batch_size=32, collate_fn=collate))
    want = list(_tf_examples(tokens).map(lambda x: {**x, "n": tf.size(x["inputs"])})
                .padded_batch(32).as_numpy_iterator())
    assert len(got) == len(want)
    for batch, expected in zip(got, want):
        for key in ("inputs", "targets"):
            np.testing.assert_array_equal(batch[key].numpy(), expected[key], err_msg=key)
        assert batch["inputs_length"].tolist() == expected["n"].tolist()
