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
    RawTensor,
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


def tf_sequence_shard(path):
    """SequenceExamples built and written by TensorFlow: a context, lists of
    1 and 3 numbers per step, bytes lists of 1 and 2 values per step, a list
    some records lack, and records with no steps."""
    def feature(kind, values):
        if kind == "int64":
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        if kind == "float":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

    def flist(kind, steps):
        return tf.train.FeatureList(feature=[feature(kind, s) for s in steps])

    with tf.io.TFRecordWriter(str(path)) as w:
        for i, t in enumerate(LENGTHS):
            lists = {"tokens": flist("int64", [[100 * i + s] for s in range(t)]),
                     "frames": flist("float", [[s + 0.5, -s, i / 3] for s in range(t)]),
                     "words": flist("bytes", [[f"w{i}.{s}".encode()] for s in range(t)]),
                     "pairs": flist("bytes", [[b"k%d" % s, bytes([i, s])] for s in range(t)])}
            if i % 2:
                lists["extra"] = flist("int64", [[s, s * s] for s in range(i)])
            context = {"label": feature("int64", [i]), "score": feature("float", [i * 0.25, 1.5]),
                       "name": feature("bytes", [f"seq{i}".encode()])}
            message = tf.train.SequenceExample(context=tf.train.Features(feature=context),
                                               feature_lists=tf.train.FeatureLists(feature_list=lists))
            w.write(message.SerializeToString())
    return [record.numpy() for record in tf.data.TFRecordDataset(str(path))]


def printed_block(text, name):
    """The ``name = {...}`` block (or ``name = None``) that inspect printed after its last header."""
    lines = text.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith(f"{name} = "))
    if lines[start] == f"{name} = None":
        return lines[start]
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return "\n".join(lines[start:end + 1])


def test_inspect_prints_sequence_specs_that_read_as_tensorflow_does(tmp_path, capsys):
    """inspect on TensorFlow-written SequenceExamples lists the feature lists
    and prints specs (ours and tf.io's) that, pasted into TFRecordDataset,
    give tf.io.parse_single_sequence_example's values."""
    from tfrecord_torch import Float, Text
    from tfrecord_torch.cli import main

    path = tmp_path / "tf_seq.tfrecord"
    payloads = tf_sequence_shard(path)
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    for key, kind, steps, width, present in (("tokens", "int64", "0-5", "1", "5/5"),
                                             ("frames", "float", "0-5", "3", "5/5"),
                                             ("pairs", "bytes", "0-5", "2", "5/5"),
                                             ("extra", "int64", "1-3", "2", "2/5")):
        assert [key, kind, steps, width, present] in [line.split() for line in text.splitlines()], key
    namespace = {"Int64": Int64, "Float": Float, "Bytes": Bytes, "Text": Text, "tf": tf}
    for name in ("features", "sequence_features", "context_features"):
        exec(printed_block(text, name), namespace)
    tf_schema = {"context_features": namespace["context_features"], "sequence_features": None}
    exec(printed_block(text.split("tfrecord_torch spec")[0], "sequence_features"), namespace)
    tf_schema["sequence_features"] = namespace["sequence_features"]
    exec(printed_block(text, "sequence_features"), namespace)  # ours again (printed last)
    ours = list(TFRecordDataset(path, features=namespace["features"],
                                sequence_features=namespace["sequence_features"]))
    from_tf_schema = list(TFRecordDataset(path, features=tf_schema["context_features"],
                                          sequence_features=tf_schema["sequence_features"]))
    assert len(ours) == len(from_tf_schema) == len(payloads) == len(LENGTHS)
    for item, other, payload_bytes in zip(ours, from_tf_schema, payloads):
        context, lists = tf.io.parse_single_sequence_example(payload_bytes, **tf_schema)
        want = {**{k: np.asarray(v.numpy()) for k, v in context.items()},
                **{k: np.asarray(v.numpy()) for k, v in lists.items()}}
        assert sorted(item) == sorted(want) == sorted(other)
        for key, value in want.items():
            for got in (item[key], other[key]):
                if value.dtype.kind in "OS":  # bytes: a list per step (or one bytes value)
                    assert np.array(got, dtype=object).reshape(value.shape).tolist() == value.tolist(), key
                else:
                    assert got.dtype == torch.from_numpy(value).dtype, key
                    np.testing.assert_array_equal(got.numpy(), value, err_msg=key)


def test_reading_sequence_examples_without_a_spec_gives_context_and_feature_lists(tmp_path):
    """features=None on SequenceExamples yields each record's context features
    and feature lists (as parse_sequence_example gives them), per record, in
    batch mode and by index; checked against TensorFlow's parse."""
    from tfrecord_torch import parse_sequence_example

    path = tmp_path / "tf_seq.tfrecord"
    payloads = tf_sequence_shard(path)
    records = list(TFRecordDataset(path))
    ds = IndexedTFRecordDataset(path)
    indexed = [ds[i] for i in range(len(ds))]
    (batch,) = list(TFRecordDataset(path, batch_size=len(payloads)))
    for i, (item, payload_bytes) in enumerate(zip(records, payloads)):
        context, lists = parse_sequence_example(payload_bytes)
        assert sorted(item) == sorted({**context, **lists}) == sorted(indexed[i])
        assert "tokens" in item and ("extra" in item) == bool(i % 2)
        want_context, want_lists = tf.io.parse_single_sequence_example(
            payload_bytes, context_features={"label": tf.io.FixedLenFeature([], tf.int64)},
            sequence_features={"frames": tf.io.FixedLenSequenceFeature([3], tf.float32),
                               "pairs": tf.io.FixedLenSequenceFeature([2], tf.string)})
        assert item["label"].tolist() == [want_context["label"].numpy()]
        frames = np.array(item["frames"], np.float32).reshape(-1, 3)
        np.testing.assert_array_equal(frames, want_lists["frames"].numpy())
        assert item["pairs"] == want_lists["pairs"].numpy().tolist()
        for got in (indexed[i], {k: v[i] for k, v in batch.items()}):
            assert [np.asarray(s).tolist() for s in got["frames"]] == frames.tolist()
            assert got["pairs"] == item["pairs"] and np.asarray(got["label"]).tolist() == [i]


def test_batch_mode_without_a_spec_keeps_feature_lists_of_same_sized_records(tmp_path):
    """Records of one size and shape (the batch parser's layout path) still
    give their feature lists in batch mode without a spec."""
    path = tmp_path / "same.tfrecord"
    with RecordWriter(path) as w:
        for i in range(8):
            w.write(make_sequence_example({"label": i}, {"tokens": [[i], [i + 1]]}))
    (batch,) = list(TFRecordDataset(path, batch_size=8))
    assert batch["label"][:, 0].tolist() == list(range(8))
    assert [[int(s[0]) for s in steps] for steps in batch["tokens"]] == [[i, i + 1] for i in range(8)]


def test_a_key_in_both_context_and_feature_lists_is_an_error_without_a_spec(tmp_path):
    path = tmp_path / "both.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_sequence_example({"x": 1}, {"x": [[1], [2]]}))
    with pytest.raises(FeatureError, match=r"both.tfrecord: record 0.*'x'.*both a context feature and a "
                                           r"feature list.*sequence_features"):
        list(TFRecordDataset(path))


def frames_payload(i):
    """A YouTube-8M-like record: one bytes value per frame (``rgb`` 8 bytes, ``audio`` 2 int16s)."""
    rng = np.random.default_rng(i)
    t = LENGTHS[i]
    return make_sequence_example(
        {"id": f"v{i}".encode()},
        {"rgb": [rng.integers(0, 256, 8, dtype=np.uint8).tobytes() for _ in range(t)],
         "audio": [rng.integers(-300, 300, 2, dtype=np.int16).tobytes() for _ in range(t)]})


FRAMES = {"rgb": RawTensor(dtype="uint8", shape=(8,)), "audio": RawTensor(dtype="int16", shape=(2,))}


def tf_frames(i):
    _, seq = tf.io.parse_single_sequence_example(
        frames_payload(i), sequence_features={k: tf.io.FixedLenSequenceFeature([], tf.string) for k in FRAMES})
    return {"rgb": tf.io.decode_raw(seq["rgb"], tf.uint8).numpy().reshape(-1, 8),
            "audio": tf.io.decode_raw(seq["audio"], tf.int16).numpy().reshape(-1, 2)}


@pytest.fixture
def frames_shard(tmp_path):
    path = tmp_path / "frames.tfrecord"
    with RecordWriter(path) as w:
        for i in range(len(LENGTHS)):
            w.write(frames_payload(i))
    return path


def test_raw_tensor_steps_are_one_tensor_per_record(frames_shard):
    """RawTensor over one bytes value per step gives [T, *shape], the values
    tf.io.decode_raw gives, an empty list [0, *shape]."""
    items = list(TFRecordDataset(frames_shard, sequence_features=FRAMES))
    for i, item in enumerate(items):
        want = tf_frames(i)
        for key in FRAMES:
            assert isinstance(item[key], torch.Tensor) and item[key].shape == want[key].shape
            np.testing.assert_array_equal(item[key].numpy(), want[key])
        assert item["rgb"].dtype == torch.uint8 and item["audio"].dtype == torch.int16


@pytest.mark.parametrize("batch_mode", [False, True])
def test_raw_tensor_steps_pad_with_lengths(frames_shard, batch_mode):
    """Per-step array bytes batch as [B, T_max, *shape] zero-padded with ``_length``,
    by pad_collate and in batch mode alike."""
    if batch_mode:
        batches = list(TFRecordDataset(frames_shard, sequence_features=FRAMES, batch_size=5))
    else:
        batches = list(DataLoader(TFRecordDataset(frames_shard, sequence_features=FRAMES), batch_size=5,
                                  collate_fn=pad_collate))
    (batch,) = batches
    for key, width in (("rgb", 8), ("audio", 2)):
        assert batch[key].shape == (5, max(LENGTHS), width)
        assert batch[f"{key}_length"].tolist() == LENGTHS
        for i, t in enumerate(LENGTHS):
            np.testing.assert_array_equal(batch[key][i, :t].numpy(), tf_frames(i)[key])
            assert not batch[key][i, t:].any()


def test_raw_tensor_steps_errors_name_the_step(tmp_path):
    path = tmp_path / "bad.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_sequence_example({}, {"rgb": [bytes(8), bytes(6)]}))
    with pytest.raises(FeatureError, match=r"record 0.*'rgb'.*step 1: 6 values do not fit shape \(8,\)"):
        list(TFRecordDataset(path, sequence_features=FRAMES | {"audio": RawTensor(shape=(2,), default=None)}))
    with pytest.raises(FeatureError, match=r"'rgb'.*step 1 holds shape \(6,\), step 0 \(8,\)"):
        list(TFRecordDataset(path, sequence_features={"rgb": RawTensor()}))


@pytest.mark.parametrize(("step", "message"), [
    ([bytes(8), bytes(8)], "step 1 holds 2 values, expected 1"),
    (np.array([], dtype="S1"), "step 1 holds 0 values, expected 1"),
    (np.zeros(0, np.int64), "step 1 holds numbers, expected bytes"),
    ([7], "step 1 holds numbers, expected bytes"),
    ([1.5], "step 1 holds numbers, expected bytes"),
])
def test_raw_tensor_steps_of_other_kinds_are_named(tmp_path, step, message):
    """A RawTensor feature list whose step is not one bytes value names that
    step, whatever the other steps hold."""
    path = tmp_path / "bad.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_sequence_example({}, {"rgb": [[bytes(8)], step, [bytes(8)]]}))
    with pytest.raises(FeatureError, match=rf"record 0.*'rgb'.*{message}"):
        list(TFRecordDataset(path, sequence_features={"rgb": RawTensor(shape=(8,))}))


def test_raw_tensor_frames_are_joined_by_the_parser_once(frames_shard):
    """The compiled parser hands RawTensor's frames over as where they lie in
    the payload (no bytes object per frame); a key another feature also reads
    (here as bytes per step) is left as steps for both, each feature getting
    what TF gives it."""
    from tfrecord_torch.example import codec
    from tfrecord_torch.features.sequence import make_spec

    spec = make_spec(None, FRAMES)
    assert spec._joined == {"rgb", "audio"}
    if codec._FAST is not None:
        lists = codec.parse_sequence_example(frames_payload(1), spec._joined)[1]
        assert isinstance(lists["rgb"], codec.JoinedSteps) and lists["rgb"].view().shape == (LENGTHS[1], 8)
    both = FRAMES | {"rgb_bytes": Bytes("rgb")}
    assert make_spec(None, both)._joined == {"audio"}
    for i, item in enumerate(TFRecordDataset(frames_shard, sequence_features=both)):
        want = tf_frames(i)
        np.testing.assert_array_equal(item["rgb"].numpy(), want["rgb"])
        np.testing.assert_array_equal(item["audio"].numpy(), want["audio"])
        assert item["rgb_bytes"] == [row.tobytes() for row in want["rgb"]]


def test_raw_tensor_joined_frames_of_the_wrong_size_name_step_0(tmp_path):
    path = tmp_path / "bad.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_sequence_example({}, {"rgb": [bytes(6), bytes(6)]}))
        w.write(make_sequence_example({}, {"rgb": [bytes(7), bytes(7)]}))
    with pytest.raises(FeatureError, match=r"record 0.*'rgb'.*step 0: 6 values do not fit shape \(8,\)"):
        list(TFRecordDataset(path, sequence_features={"rgb": RawTensor(shape=(8,))}))
    with pytest.raises(FeatureError, match=r"record 1.*'rgb'.*step 0: 7 bytes is not a whole number of int16"):
        list(TFRecordDataset(path, sequence_features={"rgb": RawTensor(dtype="int16")}))
    rows = [item["rgb"] for item in TFRecordDataset(path, sequence_features={"rgb": RawTensor()})]
    assert [tuple(r.shape) for r in rows] == [(2, 6), (2, 7)] and rows[0].dtype == torch.uint8
