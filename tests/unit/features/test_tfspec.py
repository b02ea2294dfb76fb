"""TF feature descriptions as features=, checked against tf.io.parse_single_example."""

import numpy as np
import pytest
import tensorflow as tf
import torch
from torch.utils.data import DataLoader

from tfrecord_torch import (
    FeatureError,
    Int64,
    RecordWriter,
    Source,
    TFRecordDataset,
    make_example,
    pad_collate,
    tfspec,
)
from tfrecord_torch.example.protos import Example


def records():
    out = []
    for i in range(4):
        fields = {"label": i, "vec": np.arange(3, dtype=np.float32) + i, "name": f"n{i}",
                  "var": np.arange(i, dtype=np.int64), "words": [f"w{j}" for j in range(i + 1)],
                  "steps": np.arange(2 * i, dtype=np.float32), "idx": np.array([i % 5, 5], np.int64),
                  "val": np.array([1.5 * i, 2.0], np.float32)}
        if i == 2:
            del fields["label"]
        out.append(make_example(fields))
    empty = Example()  # a key holding an empty Feature() (no kind): the default applies, as in TF
    empty.ParseFromString(out[3])
    empty.features.feature["label"].Clear()
    out[3] = empty.SerializeToString()
    return out


def description(io):
    return {
        "label": io.FixedLenFeature([], io_dtype(io, "int64"), default_value=-1),
        "vec": io.FixedLenFeature([3], io_dtype(io, "float32")),
        "name": io.FixedLenFeature([], io_dtype(io, "string")),
        "var": io.VarLenFeature(io_dtype(io, "int64")),
        "words": io.RaggedFeature(io_dtype(io, "string")),
        "steps": io.FixedLenSequenceFeature([2], io_dtype(io, "float32"), allow_missing=True),
        "sparse": io.SparseFeature(index_key="idx", value_key="val", dtype=io_dtype(io, "float32"), size=6),
    }


def io_dtype(io, name):
    return getattr(tf, name) if io is tf.io else name


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "x.tfrecord"
    with RecordWriter(path) as w:
        for r in records():
            w.write(r)
    return path


def as_numpy(value):
    if isinstance(value, tf.SparseTensor):
        return value.values.numpy()
    if isinstance(value, tf.RaggedTensor):
        return value.flat_values.numpy()
    return value.numpy()


@pytest.mark.parametrize("io", [tf.io, tfspec], ids=["tf.io objects", "tfspec classes"])
def test_values_equal_parse_single_example(shard, io):
    items = list(TFRecordDataset(shard, features=description(io)))
    for payload, item in zip(records(), items):
        want = tf.io.parse_single_example(payload, description(tf.io))
        for key in ("label", "vec", "var", "steps"):
            np.testing.assert_array_equal(item[key].numpy(), as_numpy(want[key]), err_msg=key)
        np.testing.assert_array_equal(item["sparse"].numpy(), tf.sparse.to_dense(want["sparse"]).numpy())
        assert item["name"] == want["name"].numpy()
        assert item["words"] == list(as_numpy(want["words"]))
    assert [int(i["label"]) for i in items] == [0, 1, -1, -1]


def test_varlen_values_collate_with_lengths(shard):
    loader = DataLoader(TFRecordDataset(shard, features=description(tf.io)), batch_size=4, collate_fn=pad_collate)
    (batch,) = list(loader)
    assert batch["var"].shape == (4, 3) and batch["var_length"].tolist() == [0, 1, 2, 3]
    assert batch["steps"].shape == (4, 3, 2) and batch["steps_length"].tolist() == [0, 1, 2, 3]
    assert batch["words_length"].tolist() == [1, 2, 3, 4]


def test_default_applies_to_an_empty_feature_with_own_classes(shard):
    items = list(TFRecordDataset(shard, features={"label": Int64(default=7)}))
    assert [int(i["label"]) for i in items] == [0, 1, 7, 7]


def test_bad_descriptions_and_data(shard):
    with pytest.raises(ValueError, match=r"'label'.*default"):
        TFRecordDataset(shard, features={"label": tf.io.FixedLenFeature([2], tf.int64, default_value=[1, 2, 3])})
    with pytest.raises(ValueError, match=r"'x'.*dtype"):
        TFRecordDataset(shard, features={"x": tfspec.FixedLenFeature([], "int32")})
    with pytest.raises(ValueError, match="allow_missing"):
        TFRecordDataset(shard, features={"x": tf.io.FixedLenSequenceFeature([], tf.int64)})
    with pytest.raises(FeatureError, match=r"x.tfrecord: record 0 .*'vec'.*3 values, expected 2"):
        list(TFRecordDataset(shard, features={"vec": tf.io.FixedLenFeature([2], tf.float32)}))
    with pytest.raises(FeatureError, match=r"record 0 .*'vec'.*float values, expected int64"):
        list(TFRecordDataset(shard, features={"vec": tf.io.FixedLenFeature([3], tf.int64)}))
    with pytest.raises(FeatureError, match=r"record 0 .*'steps'.*no feature lists"):
        list(TFRecordDataset(shard, sequence_features={"steps": tf.io.FixedLenSequenceFeature([2], tf.float32)}))


def test_sequence_description(tmp_path):
    from tfrecord_torch import make_sequence_example

    path = tmp_path / "s.tfrecord"
    payload = make_sequence_example({"label": 3}, {"frames": [np.ones(2, np.float32), np.zeros(2, np.float32)]})
    with RecordWriter(path) as w:
        w.write(payload)
    context = {"label": tf.io.FixedLenFeature([], tf.int64)}
    seq = {"frames": tf.io.FixedLenSequenceFeature([2], tf.float32), "gone": tf.io.FixedLenSequenceFeature(
        [], tf.int64, allow_missing=True)}
    (item,) = list(TFRecordDataset(path, features=context, sequence_features=seq))
    want_c, want_s = tf.io.parse_single_sequence_example(payload, context_features=context, sequence_features=seq)
    assert int(item["label"]) == int(want_c["label"])
    np.testing.assert_array_equal(item["frames"].numpy(), want_s["frames"].numpy())
    assert item["gone"].shape == tuple(want_s["gone"].shape) == (0,)
    assert item["frames"].dtype == torch.float32


@pytest.mark.parametrize("io", [tf.io, tfspec], ids=["tf.io objects", "tfspec classes"])
def test_multi_dimensional_sparse_features_equal_tensorflow(tmp_path, io):
    path = tmp_path / "s.tfrecord"
    rows = [([0, 2], [1, 3], [1.5, -2.0]), ([], [], []), ([1], [0], [7.0])]
    with RecordWriter(path) as w:
        for ix, iy, val in rows:
            w.write(make_example({"ix": np.array(ix, np.int64), "iy": np.array(iy, np.int64),
                                  "val": np.array(val, np.float32)}))

    def spec(io):
        return {"grid": io.SparseFeature(index_key=["ix", "iy"], value_key="val",
                                         dtype=io_dtype(io, "float32"), size=[3, 4])}
    items = list(TFRecordDataset(path, features=spec(io)))
    for (ix, iy, val), item in zip(rows, items):
        payload = make_example({"ix": np.array(ix, np.int64), "iy": np.array(iy, np.int64),
                                "val": np.array(val, np.float32)})
        want = tf.sparse.to_dense(tf.io.parse_single_example(payload, spec(tf.io))["grid"]).numpy()
        assert item["grid"].shape == (3, 4)
        np.testing.assert_array_equal(item["grid"].numpy(), want)
    out_of_range = {"ix": np.array([0], np.int64), "iy": np.array([4], np.int64), "val": np.array([1.0], np.float32)}
    uneven = {"ix": np.array([0, 1], np.int64), "iy": np.array([0], np.int64), "val": np.array([1.0, 2.0], np.float32)}
    for record, message in ((out_of_range, r"record 0 .*'iy'.*index 4 is out of range for size 4"),
                            (uneven, r"record 0 .*2 values for 1 indices \('iy'\)")):
        bad = tmp_path / "bad.tfrecord"
        with RecordWriter(bad) as w:
            w.write(make_example(record))
        with pytest.raises(FeatureError, match=message):
            list(TFRecordDataset(bad, features=spec(io), source=Source(index=False)))
        with pytest.raises(tf.errors.InvalidArgumentError):  # TensorFlow refuses it too
            tf.sparse.to_dense(tf.io.parse_single_example(make_example(record), spec(tf.io))["grid"])
    with pytest.raises(ValueError, match="2 index keys for a 1-D size"):
        TFRecordDataset(path, features={"g": io.SparseFeature(index_key=["ix", "iy"], value_key="val",
                                                              dtype=io_dtype(io, "float32"), size=[3])})


def _nested(value):
    """Our nested rows (tensors innermost) as plain nested lists."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, bytes):
        return value
    return [_nested(v) for v in value]


@pytest.mark.parametrize("io", [tf.io, tfspec], ids=["tf.io objects", "tfspec classes"])
def test_ragged_partitions_equal_tensorflow(tmp_path, io):
    fields = {"v": np.arange(6, dtype=np.int64), "w": [b"a", b"b", b"c", b"d"],
              "lens": np.array([2, 0, 3, 1], np.int64), "splits": np.array([0, 2, 2, 5, 6], np.int64),
              "starts": np.array([0, 2, 2, 5], np.int64), "limits": np.array([2, 2, 5, 6], np.int64),
              "ids": np.array([0, 0, 2, 2, 2, 3], np.int64), "outer": np.array([1, 3], np.int64)}
    payload = make_example(fields)
    path = tmp_path / "r.tfrecord"
    with RecordWriter(path) as w:
        w.write(payload)

    def spec(io):
        R = io.RaggedFeature
        i64, s = io_dtype(io, "int64"), io_dtype(io, "string")
        return {"by_lengths": R(i64, value_key="v", partitions=[R.RowLengths("lens")]),
                "by_splits": R(i64, value_key="v", partitions=[R.RowSplits("splits")]),
                "by_starts": R(i64, value_key="v", partitions=[R.RowStarts("starts")]),
                "by_limits": R(i64, value_key="v", partitions=[R.RowLimits("limits")]),
                "by_ids": R(i64, value_key="v", partitions=[R.ValueRowIds("ids")]),
                "uniform": R(i64, value_key="v", partitions=[R.UniformRowLength(2)]),
                "two_levels": R(i64, value_key="v", partitions=[R.RowLengths("outer"), R.RowLengths("lens")]),
                "uniform_outer": R(i64, value_key="v", partitions=[R.UniformRowLength(2), R.RowLengths("lens")]),
                "strings": R(s, value_key="w", partitions=[R.UniformRowLength(2)])}
    item, = TFRecordDataset(path, features=spec(io))
    want = tf.io.parse_single_example(payload, spec(tf.io))
    for key in spec(tf.io):  # TF gives a dense tensor where every partition is uniform
        expected = want[key].to_list() if isinstance(want[key], tf.RaggedTensor) else want[key].numpy().tolist()
        assert _nested(item[key]) == expected, key


@pytest.mark.parametrize("lens, message", [([2, 0, 3], "do not add up to the 6 values"),
                                           ([2, -1, 5], "do not add up")])
def test_bad_ragged_partitions_are_named(tmp_path, lens, message):
    path = tmp_path / "r.tfrecord"
    payload = make_example({"v": np.arange(6, dtype=np.int64), "lens": np.array(lens, np.int64)})
    with RecordWriter(path) as w:
        w.write(payload)
    spec = {"r": tf.io.RaggedFeature(tf.int64, value_key="v", partitions=[tf.io.RaggedFeature.RowLengths("lens")])}
    with pytest.raises(FeatureError, match=rf"record 0 .*'lens'.*{message}"):
        list(TFRecordDataset(path, features=spec))
    checked = {"r": tf.io.RaggedFeature(tf.int64, value_key="v", validate=True,
                                        partitions=[tf.io.RaggedFeature.RowLengths("lens")])}
    with pytest.raises(tf.errors.InvalidArgumentError):  # TensorFlow refuses it too, when asked to validate
        tf.io.parse_single_example(payload, checked)
