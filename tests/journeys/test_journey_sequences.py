"""YouTube-8M frame-level records as TensorFlow writes them, read the way
docs/guide/sequences.md shows: one video as [T, 1024] and [T, 128], padded
batches with lengths through pad_collate and in batch mode. TensorFlow is the
oracle: tf.io.parse_single_sequence_example + tf.io.decode_raw per record,
tf.data's padded_batch per batch."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf
from torch.utils.data import DataLoader

from tfrecord_torch import Bytes, Int64, RawTensor, TFRecordDataset, pad_collate

FRAMES = [7, 1, 12, 0, 5, 9, 3]  # a video with no frames too


def _bytes(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    """YouTube-8M's layout, written by tf.io.TFRecordWriter from tf.train protos."""
    path = tmp_path_factory.mktemp("yt8m") / "train0000.tfrecord"
    rng = np.random.default_rng(8)
    with tf.io.TFRecordWriter(str(path)) as w:
        for i, t in enumerate(FRAMES):
            context = tf.train.Features(feature={
                "id": _bytes([f"v{i}".encode()]),
                "labels": tf.train.Feature(int64_list=tf.train.Int64List(value=rng.integers(0, 3862, 1 + i % 3)))})
            lists = tf.train.FeatureLists(feature_list={
                key: tf.train.FeatureList(feature=[_bytes([rng.integers(0, 256, n, dtype=np.uint8).tobytes()])
                                                   for _ in range(t)])
                for key, n in (("rgb", 1024), ("audio", 128))})
            w.write(tf.train.SequenceExample(context=context, feature_lists=lists).SerializeToString())
    return str(path)


def _tf_video(serialized):
    context, lists = tf.io.parse_single_sequence_example(
        serialized,
        context_features={"id": tf.io.FixedLenFeature([], tf.string), "labels": tf.io.VarLenFeature(tf.int64)},
        sequence_features={"rgb": tf.io.FixedLenSequenceFeature([], tf.string),
                           "audio": tf.io.FixedLenSequenceFeature([], tf.string)})
    return {"id": context["id"], "labels": tf.sparse.to_dense(context["labels"]),
            "rgb": tf.reshape(tf.io.decode_raw(lists["rgb"], tf.uint8), [-1, 1024]),
            "audio": tf.reshape(tf.io.decode_raw(lists["audio"], tf.uint8), [-1, 128])}


def _dataset(path, **options):
    return TFRecordDataset(
        path,
        features={"id": Bytes(), "labels": Int64(shape=None)},
        sequence_features={"rgb": RawTensor(dtype="uint8", shape=(1024,)),
                           "audio": RawTensor(dtype="uint8", shape=(128,))},
        **options)


def test_one_video_per_record(frames):
    want = list(tf.data.TFRecordDataset(frames).map(_tf_video).as_numpy_iterator())
    got = list(_dataset(frames))
    assert len(got) == len(want)
    for video, expected in zip(got, want):
        assert video["id"] == expected["id"]
        for key in ("labels", "rgb", "audio"):
            np.testing.assert_array_equal(video[key].numpy(), expected[key], err_msg=key)
        assert video["rgb"].shape == (len(expected["rgb"]), 1024)


def _tf_batches(path, size):
    return list(tf.data.TFRecordDataset(path).map(_tf_video)
                .map(lambda v: {**v, "frames": tf.shape(v["rgb"])[0], "count": tf.size(v["labels"])})
                .padded_batch(size).as_numpy_iterator())


def _check_batches(got, want):
    assert len(got) == len(want)
    for batch, expected in zip(got, want):
        for key in ("rgb", "audio"):
            assert batch[key].shape == expected[key].shape
            np.testing.assert_array_equal(batch[key].numpy(), expected[key], err_msg=key)
            assert batch[f"{key}_length"].tolist() == expected["frames"].tolist()
        assert list(batch["id"]) == list(expected["id"])


def test_padded_batches_with_pad_collate(frames):
    collate = functools.partial(pad_collate, sequences=["rgb", "audio", "labels"])
    got = list(DataLoader(_dataset(frames), batch_size=3, collate_fn=collate))
    want = _tf_batches(frames, 3)
    _check_batches(got, want)
    for batch, expected in zip(got, want):
        np.testing.assert_array_equal(batch["labels"].numpy(), expected["labels"])
        assert batch["labels_length"].tolist() == expected["count"].tolist()


def test_padded_batches_in_batch_mode(frames):
    got = list(_dataset(frames, batch_size=3))
    want = _tf_batches(frames, 3)
    _check_batches(got, want)
    for batch, expected in zip(got, want):
        assert [labels.tolist() for labels in batch["labels"]] == \
            [row[:n].tolist() for row, n in zip(expected["labels"], expected["count"])]
