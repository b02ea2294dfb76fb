"""SequenceExample datasets, checked against tf.io.parse_single_sequence_example."""

import numpy as np
import pytest
import tensorflow as tf
import torch
from torch.utils.data import DataLoader

from tfrecord_torch import (
    Bytes,
    FeatureError,
    Float,
    IndexedTFRecordDataset,
    Int64,
    RecordWriter,
    TFRecordDataset,
    make_example,
    make_sequence_example,
    pad_collate,
)

LENGTHS = [3, 1, 5, 0, 2]


def payload(i):
    t = LENGTHS[i]
    return make_sequence_example(
        {"label": i},
        {"tokens": [np.array([10 * i + s], np.int64) for s in range(t)],
         "frames": [np.arange(3, dtype=np.float32) + s for s in range(t)],
         "words": [f"w{s}".encode() for s in range(t)]})


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "seq.tfrecord"
    with RecordWriter(path) as w:
        for i in range(len(LENGTHS)):
            w.write(payload(i))
    return path


CONTEXT = {"label": Int64()}
SEQUENCE = {"tokens": Int64(), "frames": Float(shape=(3,)), "words": Bytes()}


def tf_parse(i):
    context, seq = tf.io.parse_single_sequence_example(
        payload(i), context_features={"label": tf.io.FixedLenFeature([], tf.int64)},
        sequence_features={"tokens": tf.io.FixedLenSequenceFeature([], tf.int64),
                           "frames": tf.io.FixedLenSequenceFeature([3], tf.float32),
                           "words": tf.io.FixedLenSequenceFeature([], tf.string)})
    return {**{k: v.numpy() for k, v in context.items()}, **{k: v.numpy() for k, v in seq.items()}}


def check_item(item, i):
    want = tf_parse(i)
    assert item["label"].shape == () and int(item["label"]) == want["label"]
    np.testing.assert_array_equal(item["tokens"].numpy(), want["tokens"])
    assert item["tokens"].dtype == torch.int64 and item["tokens"].shape == (LENGTHS[i],)
    np.testing.assert_array_equal(item["frames"].numpy(), want["frames"])
    assert item["frames"].shape == (LENGTHS[i], 3)
    assert item["words"] == list(want["words"])


def test_iterable_and_map_style_match_tensorflow(shard):
    items = list(TFRecordDataset(shard, features=CONTEXT, sequence_features=SEQUENCE))
    for i, item in enumerate(items):
        check_item(item, i)
    ds = IndexedTFRecordDataset(shard, features=CONTEXT, sequence_features=SEQUENCE)
    for i in range(len(ds)):
        check_item(ds[i], i)


def test_batch_mode_and_pad_collate_pad_steps(shard):
    ds = TFRecordDataset(shard, features=CONTEXT, sequence_features=SEQUENCE, batch_size=5)
    (batch,) = list(DataLoader(ds, batch_size=None))
    assert batch["tokens"].shape == (5, 5) and batch["frames"].shape == (5, 5, 3)
    assert batch["tokens_length"].tolist() == LENGTHS
    assert batch["tokens"][0].tolist() == [0, 1, 2, 0, 0]
    assert batch["words_length"].tolist() == LENGTHS and batch["words"][2] == [b"w0", b"w1", b"w2", b"w3", b"w4"]
    loader = DataLoader(TFRecordDataset(shard, features=CONTEXT, sequence_features=SEQUENCE), batch_size=5,
                        collate_fn=pad_collate)
    (other,) = list(loader)
    assert torch.equal(other["frames"], batch["frames"]) and torch.equal(other["label"], batch["label"])


def test_missing_feature_list_and_allow_missing(shard):
    ds = TFRecordDataset(shard, sequence_features={"nope": Int64()})
    with pytest.raises(FeatureError, match=r"seq.tfrecord.*record 0.*'nope'.*feature list is missing"):
        list(ds)
    items = list(TFRecordDataset(shard, sequence_features={"nope": Float(shape=(2,), default=None)}))
    assert items[0]["nope"].shape == (0, 2)


def test_sequence_example_read_as_example_says_so(shard):
    with pytest.raises(FeatureError, match=r"record 0.*'tokens'.*SequenceExample.*sequence_features"):
        list(TFRecordDataset(shard, features={"tokens": Int64()}))


def test_sequence_feature_on_an_example(tmp_path):
    path = tmp_path / "ex.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_example({"tokens": [1, 2]}))
    with pytest.raises(FeatureError, match=r"ex.tfrecord: record 0.*'tokens'.*no feature lists"):
        list(TFRecordDataset(path, sequence_features={"tokens": Int64()}))


def test_bad_steps_are_named(tmp_path):
    path = tmp_path / "bad.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_sequence_example({}, {"frames": [np.zeros(3, np.float32), np.zeros(2, np.float32)]}))
        w.write(make_sequence_example({}, {"frames": [np.zeros(3, np.int64)]}))
    ds = IndexedTFRecordDataset(path, sequence_features={"frames": Float(shape=(3,))})
    with pytest.raises(FeatureError, match=r"record 0.*'frames'.*step 1 holds 2 values, expected 3"):
        ds[0]
    with pytest.raises(FeatureError, match=r"record 1.*'frames'.*step 0 holds int64 values, expected float"):
        ds[1]
    with pytest.raises(ValueError, match="per-step shape"):
        TFRecordDataset(path, sequence_features={"frames": Float(shape=None)})


def test_batch_parser_equals_tf_parse_sequence_example():
    """parse_sequence_example_batch gives tf.io.parse_sequence_example's padded
    lists and lengths (numbers; our columns keep the step width as the last axis)."""
    from tfrecord_torch import parse_sequence_example_batch

    payloads = [payload(i) for i in range(len(LENGTHS))]
    context, lists, lengths = parse_sequence_example_batch(payloads)
    want_context, want_lists, want_lengths = tf.io.parse_sequence_example(
        payloads, context_features={"label": tf.io.FixedLenFeature([], tf.int64)},
        sequence_features={"tokens": tf.io.FixedLenSequenceFeature([], tf.int64),
                           "frames": tf.io.FixedLenSequenceFeature([3], tf.float32),
                           "words": tf.io.FixedLenSequenceFeature([], tf.string)})
    np.testing.assert_array_equal(context["label"][:, 0], want_context["label"].numpy())
    assert lists["tokens"].dtype == np.int64 and lists["frames"].dtype == np.float32
    np.testing.assert_array_equal(lists["tokens"][..., 0], want_lists["tokens"].numpy())
    np.testing.assert_array_equal(lists["frames"], want_lists["frames"].numpy())
    for key in ("tokens", "frames"):
        np.testing.assert_array_equal(lengths[key], want_lengths[key].numpy())
    assert "words" not in lengths  # bytes stay per record: the steps as they are
    assert [len(w) for w in lists["words"]] == LENGTHS
    for row, want in zip(lists["words"], want_lists["words"].numpy()):
        assert row == [[w] for w in want[:len(row)]]  # each step a list of bytes


def test_batch_parser_missing_lists_and_mixed_widths():
    from tfrecord_torch import parse_sequence_example_batch

    payloads = [make_sequence_example({"a": 1}, {"x": [[1, 2], [3, 4]]}),
                make_sequence_example({"b": b"k"}, {}),
                make_sequence_example({"a": 2}, {"x": [[5, 6]], "y": [[1], [2, 3]]})]
    context, lists, lengths = parse_sequence_example_batch(payloads)
    assert context["a"][1] is None and context["a"][0].tolist() == [1] and context["b"][1] == [b"k"]
    assert lists["x"].tolist() == [[[1, 2], [3, 4]], [[0, 0], [0, 0]], [[5, 6], [0, 0]]]
    assert lengths["x"].tolist() == [2, 0, 1]
    assert lists["y"][0] is None and [s.tolist() for s in lists["y"][2]] == [[1], [2, 3]]  # widths differ
    assert "y" not in lengths
    assert parse_sequence_example_batch([]) == ({}, {}, {})


def test_batch_parser_takes_a_chunk(shard):
    from tfrecord_torch import parse_sequence_example_batch
    from tfrecord_torch.records.framing import iter_chunks
    from tfrecord_torch.records.streams import open_stream

    with open_stream(str(shard)) as stream:
        (chunk,) = list(iter_chunks(stream))
    _, lists, lengths = parse_sequence_example_batch(chunk)
    assert lengths["tokens"].tolist() == LENGTHS
    assert lists["tokens"][2, :, 0].tolist() == [20, 21, 22, 23, 24]


def test_batch_parser_names_a_bad_record():
    from tfrecord_torch import ExampleDecodeError, parse_sequence_example_batch

    with pytest.raises(ExampleDecodeError, match="SequenceExample"):
        parse_sequence_example_batch([payload(0), b"\x0a\xff"])
