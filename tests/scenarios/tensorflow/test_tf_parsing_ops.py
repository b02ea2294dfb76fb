"""TensorFlow's own parsing tests (tensorflow/python/kernel_tests/io_ops/parsing_ops_test.py),
transcribed: their records and feature descriptions, read by this library's
datasets (iterable, map-style, batch mode) and parse functions, with
``tf.io.parse_single_example`` / ``parse_single_sequence_example`` on the same
serialized records as the oracle. One test per TF method, named after it.

Where TF gives a SparseTensor this library gives what the README documents:
a VarLenFeature's values (a feature list's: one row per step), a
SparseFeature as ``tf.sparse.to_dense`` gives it; a string FixedLenFeature
is a flat list of its values. TF's batch ``parse_example`` pads records to
one shape; each record's values are those of ``parse_single_example``, which
the tests compare (batch mode's padding is compared where TF's test checks
it, ``testSequenceExampleBatch``).

Not applicable (TF machinery with no user-visible equivalent here):

- ``testRawParseExampleRejectsZeroVariableDenseDimension``,
  ``testRawParseSingleExampleRejectsZeroVariableDenseDimension``,
  ``testRawParseSequenceExampleRejectsZeroFeatureListDimension``,
  ``testRawParseSingleSequenceExampleRejectsZeroFeatureListDimension``: call
  the generated C++ op wrappers (``gen_parsing_ops``) with raw shape
  arguments; the description-level check (a zero step dimension) is
  ``test_fixed_len_sequence_feature_zero_dim_does_not_crash``.
- ``DecodeJSONExampleTest`` (6 methods): ``tf.io.decode_json_example``, a
  JSON-to-proto op; this library reads serialized protos only.
- ``DecodeRawTest``: 6 of its 8 methods decode a tensor of several strings
  of different lengths at once, or pad each to ``fixed_length``; here a
  record's bytes decode alone (``RawTensor``), with no padding option. The
  two that decode equal-length strings are transcribed
  (``test_decode_raw_equal_length``).
- ``ParseTensorOpTest`` (4), ``ParseTensorVariantRegressionTest`` (1):
  ``tf.io.parse_tensor`` of TensorProtos, transcribed in
  ``test_tf_parse_tensor.py`` beside this module (with what does not apply).
"""

import numpy as np
import pytest
import tensorflow as tf

from tfrecord_torch import (
    FeatureError,
    IndexedTFRecordDataset,
    TFRecordDataset,
    make_sequence_example,
    parse_example,
    parse_sequence_example,
    parse_sequence_example_batch,
    tfspec,
)

from .tf_oracle import (
    check_examples,
    check_sequences,
    empty,
    example,
    floats,
    ints,
    ours,
    plain,
    sequence_example,
    strings,
    tf_example,
    tf_sequence,
    tf_sequence_rows,
    write,
)

io = tf.io


def serialized(messages):
    return [m.SerializeToString() for m in messages]


def random_bytes(shape, seed=0):
    return np.random.default_rng(seed).random(shape).astype(bytes)


def refused(tmp_path, payloads, features, *, error=FeatureError, match=None, tf_match=None):
    """TF refuses at least one record; so does every reader of ours (naming the key)."""
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=tf_match):
        for p in payloads:
            tf_example(p, features)
    path = write(tmp_path, payloads, "refused.tfrecord")
    with pytest.raises(error, match=match):
        list(TFRecordDataset(path, features=features))
    with pytest.raises(error, match=match):
        ds = IndexedTFRecordDataset(path, features=features)
        [ds[i] for i in range(len(ds))]
    with pytest.raises(error, match=match):
        [parse_example(p, features) for p in payloads]


def refused_sequence(tmp_path, payload, sequence, *, match=None):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
        io.parse_single_sequence_example(payload, sequence_features=sequence)
    path = write(tmp_path, [payload], "refused.tfrecord")
    with pytest.raises(FeatureError, match=match):
        list(TFRecordDataset(path, sequence_features=sequence))
    with pytest.raises(FeatureError, match=match):
        IndexedTFRecordDataset(path, sequence_features=sequence)[0]
    with pytest.raises(FeatureError, match=match):
        list(TFRecordDataset(path, sequence_features=sequence, batch_size=1))


# ParseExampleTest


def test_empty_serialized_with_all_defaults(tmp_path):
    features = {
        "st_a": io.VarLenFeature(tf.int64),
        "a": io.FixedLenFeature((1, 3), tf.int64, default_value=[0, 42, 0]),
        "b": io.FixedLenFeature((3, 3), tf.string, default_value=random_bytes((3, 3))),
        "c:has_a_tricky_name": io.FixedLenFeature((2,), tf.float32,
                                                  default_value=np.random.default_rng(1).random(2, np.float32)),
    }
    want = check_examples(tmp_path, [b"", b""], features)
    assert want[0]["a"] == [[0, 42, 0]] and want[0]["st_a"] == []


def test_empty_serialized_without_defaults_should_fail(tmp_path):
    features = {
        "st_a": io.VarLenFeature(tf.int64),
        "a": io.FixedLenFeature((1, 3), tf.int64, default_value=[0, 42, 0]),
        "b": io.FixedLenFeature((3, 3), tf.string, default_value=random_bytes((3, 3))),
        "c": io.FixedLenFeature((2,), dtype=tf.float32),  # no default: required
    }
    # the key there, its value empty
    refused(tmp_path, serialized([example({"c": empty()})]), features, match="'c'")
    # the key missing
    refused(tmp_path, [b"", b""], features, match="'c'.*required feature is missing")


def test_dense_not_matching_shape_should_fail(tmp_path):
    payloads = serialized([example({"a": floats([1, 1, 3])}), example({"a": floats([-1, -1])})])
    features = {"a": io.FixedLenFeature((1, 3), tf.float32)}
    check_examples(tmp_path, payloads[:1], features)
    refused(tmp_path, payloads, features, match=r"record 1 .*'a'.*2 values, expected 3|'a'.*2 values, expected 3")


def test_dense_default_no_shape_should_fail(tmp_path):
    path = write(tmp_path, serialized([example({"a": floats([1, 1, 3])})]))
    features = {"a": io.FixedLenFeature(None, tf.float32)}
    with pytest.raises(ValueError, match="Missing shape for feature a"):
        io.parse_single_example(path.read_bytes(), features)  # any bytes: TF refuses the description
    for read in (lambda: TFRecordDataset(path, features=features),
                 lambda: IndexedTFRecordDataset(path, features=features),
                 lambda: parse_example(b"", features)):
        with pytest.raises(ValueError, match="Missing shape for feature 'a'"):
            read()


def test_serialized_containing_sparse(tmp_path):
    payloads = serialized([
        example({"st_c": floats([3, 4])}),
        example({"st_c": floats([])}),  # an empty float list
        example({"st_d": empty()}),  # a feature with nothing in it
        example({"st_c": floats([1, 2, -1]), "st_d": strings([b"hi"])}),
    ])
    features = {"st_c": io.VarLenFeature(tf.float32), "st_d": io.VarLenFeature(tf.string)}
    want = check_examples(tmp_path, payloads, features)
    assert [w["st_c"] for w in want] == [[3, 4], [], [], [1, 2, -1]]


def test_serialized_containing_sparse_feature(tmp_path):
    payloads = serialized([
        example({"val": floats([3, 4]), "idx": ints([5, 10])}),
        example({"val": floats([]), "idx": ints([])}),
        example({"val": empty()}),  # the index feature missing
        example({"val": floats([1, 2, -1]), "idx": ints([0, 9, 3])}),  # unsorted
    ])
    features = {"sp": io.SparseFeature(["idx"], "val", tf.float32, [13])}
    want = check_examples(tmp_path, payloads, features)
    assert want[3]["sp"][:4] == [1, 0, 0, -1]


def test_serialized_containing_sparse_feature_reuse(tmp_path):
    payloads = serialized([
        example({"val1": floats([3, 4]), "val2": floats([5, 6]), "idx": ints([5, 10])}),
        example({"val1": floats([]), "idx": ints([])}),
    ])
    sp1 = {"sp1": io.SparseFeature("idx", "val1", tf.float32, 13)}
    sp2 = {"sp2": io.SparseFeature("idx", "val2", tf.float32, size=7, already_sorted=True)}
    check_examples(tmp_path, payloads, sp1)
    check_examples(tmp_path, payloads[1:], sp2)
    # Index 10 is past size 7: TF's parser gives a SparseTensor with it (its test expects dense_shape
    # [2, 7]), which tf.sparse.to_dense refuses; a dense tensor of shape [7] cannot hold it, so it is refused.
    parsed = io.parse_single_example(payloads[0], sp2)["sp2"]
    assert parsed.indices.numpy().tolist() == [[5], [10]]
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.sparse.to_dense(parsed)
    with pytest.raises(FeatureError, match="'idx'.*index 10 is out of range for size 7"):
        parse_example(payloads[0], sp2)


def test_serialized_containing_3d_sparse_feature(tmp_path):
    payloads = serialized([
        example({"val": floats([3, 4]), "idx0": ints([5, 10]), "idx1": ints([0, 2])}),
        example({"val": floats([]), "idx0": ints([]), "idx1": ints([])}),
        example({"val": empty()}),
        example({"val": floats([1, 2, -1]), "idx0": ints([0, 9, 3]), "idx1": ints([1, 0, 2])}),
    ])
    features = {"sp": io.SparseFeature(["idx0", "idx1"], "val", tf.float32, [13, 3])}
    check_examples(tmp_path, payloads, features)


DENSE_FEATURES = {
    "a": io.FixedLenFeature((1, 2, 1), dtype=tf.float32),
    "b*has+a:tricky_name": io.FixedLenFeature((1, 1, 1, 1), dtype=tf.string),
}


def test_serialized_containing_dense(tmp_path):
    b = "b*has+a:tricky_name"
    payloads = serialized([example({"a": floats([1, 1]), b: strings([b"b0_str"])}),
                           example({"a": floats([-1, -1]), b: strings([b""])})])
    want = check_examples(tmp_path, payloads, DENSE_FEATURES)
    assert want[1] == {"a": [[[-1], [-1]]], b: [b""]}


def test_serialized_containing_dense_with_concat(tmp_path):
    """Two Examples serialized back to back are one Example (protobuf merges
    them; the later value of a key wins)."""
    b = "b*has+a:tricky_name"
    pairs = [(example({"a": floats([10, 10])}), example({"a": floats([1, 1]), b: strings([b"b0_str"])})),
             (example({b: strings([b"b100"])}), example({"a": floats([-1, -1]), b: strings([b"b1"])}))]
    payloads = [m.SerializeToString() + n.SerializeToString() for m, n in pairs]
    want = check_examples(tmp_path, payloads, DENSE_FEATURES)
    assert [w[b] for w in want] == [[b"b0_str"], [b"b1"]]


def test_serialized_containing_dense_scalar(tmp_path):
    payloads = serialized([example({"a": floats([1])}), example({})])
    want = check_examples(tmp_path, payloads, {"a": io.FixedLenFeature((1,), dtype=tf.float32, default_value=-1)})
    assert [w["a"] for w in want] == [[1], [-1]]


def test_serialized_containing_dense_with_defaults(tmp_path):
    payloads = serialized([example({"a": floats([1, 1])}), example({"b": strings([b"b1"])}),
                           example({"b": empty()})])
    features = {
        "a": io.FixedLenFeature((1, 2, 1), dtype=tf.float32, default_value=[3.0, -3.0]),
        "b": io.FixedLenFeature((1, 1, 1, 1), dtype=tf.string, default_value="tmp_str"),
    }
    want = check_examples(tmp_path, payloads, features)
    assert [w["b"] for w in want] == [[b"tmp_str"], [b"b1"], [b"tmp_str"]]


def test_serialized_containing_sparse_and_sparse_feature_and_dense_with_no_default(tmp_path):
    payloads = serialized([
        example({"c": floats([3, 4]), "val": strings([b"a", b"b"]), "idx": ints([0, 3])}),
        example({"c": floats([1, 2]), "val": strings([b"c"]), "idx": ints([7])}),
    ])
    features = {
        "st_a": io.VarLenFeature(tf.int64),
        "sp": io.SparseFeature("idx", "val", tf.string, 13),
        "a": io.FixedLenFeature((1, 3), tf.int64, default_value=[1, 2, 3]),
        "b": io.FixedLenFeature((3, 3), tf.string, default_value=random_bytes((3, 3))),
        "c": io.FixedLenFeature((2,), tf.float32),  # required
    }
    want = check_examples(tmp_path, payloads, features)
    assert want[1]["sp"][7] == b"c" and want[1]["sp"][0] == b""


def test_serialized_containing_sparse_and_sparse_feature_with_reuse(tmp_path):
    payloads = serialized([example({"val": strings([b"a", b"b"]), "idx": ints([0, 3])}),
                           example({"val": strings([b"c", b"d"]), "idx": ints([7, 1])})])
    features = {"idx": io.VarLenFeature(tf.int64), "sp": io.SparseFeature(["idx"], "val", tf.string, [13])}
    check_examples(tmp_path, payloads, features)


def test_serialized_containing_var_len_dense_larger_batch(tmp_path):
    rng = np.random.default_rng(3456)
    messages = []
    for i in range(256):
        words = [f"foo{i}".encode(), f"bar{i}".encode()]
        if i and rng.random() < 0.25:
            words.pop()
        if i and rng.random() < 0.25 and words:
            words.pop()
        messages.append(example({"a": ints([i]), "b": strings(words)}))
    features = {
        "a": io.FixedLenSequenceFeature(shape=(), dtype=tf.int64, allow_missing=True, default_value=-1),
        "b": io.FixedLenSequenceFeature(shape=[], dtype=tf.string, allow_missing=True, default_value="default"),
    }
    check_examples(tmp_path, serialized(messages), features)


def test_serialized_containing_var_len_dense(tmp_path):
    payloads = serialized([
        example({"c": ints([2])}),
        example({"a": floats([1, 1]), "b": strings([b"b0_str", b"b1_str"])}),
        example({"a": floats([-1, -1, 2, 2]), "b": strings([b"b1"])}),
        example({"a": floats([]), "c": ints([3])}),
    ])

    def features(a_default=None, b_shape=(1, 1, 1)):
        return {
            "a": io.FixedLenSequenceFeature((2, 1), dtype=tf.float32, allow_missing=True, default_value=a_default),
            "b": io.FixedLenSequenceFeature(b_shape, dtype=tf.string, allow_missing=True),
            "c": io.FixedLenSequenceFeature(shape=[], dtype=tf.int64, allow_missing=True),
            "d": io.FixedLenSequenceFeature(shape=[], dtype=tf.string, allow_missing=True),
        }

    want = check_examples(tmp_path, payloads, features())
    assert [w["b"] for w in want] == [[], [[b"b0_str"], [b"b1_str"]], [[b"b1"]], []]
    check_examples(tmp_path, payloads, features(a_default=-2.0))  # a padding value: per record the same
    # a string step of 2 values: record 2 holds 1 value, not a multiple of the stride
    refused(tmp_path, payloads, features(b_shape=(2, 1, 1)), match="'b'.*not a whole number of steps",
            tf_match="divisible by 2")
    # descriptions TF refuses
    path = write(tmp_path, payloads, "described.tfrecord")
    for bad, tf_match in [
        ({"a": io.FixedLenSequenceFeature((2, 1), dtype=tf.float32, allow_missing=True, default_value=[])},
         "Cannot reshape a tensor with 0 elements|Input to reshape is a tensor with 0 values"),
        ({"a": io.FixedLenFeature((None, 2, 1), dtype=tf.float32)}, "First dimension of shape for feature a unknown"),
        ({"c": io.FixedLenFeature((1, None), dtype=tf.int64, default_value=[[1]])}, "All dimensions of shape"),
        ({"c": io.FixedLenSequenceFeature(shape=[], dtype=tf.int64, allow_missing=False)},
         "FixedLenSequenceFeature requires allow_missing to be True"),
    ]:
        with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=tf_match):
            io.parse_example(payloads, bad)
        with pytest.raises(ValueError, match=f"features\\[{next(iter(bad))!r}\\]"):
            TFRecordDataset(path, features=bad)


def test_serialized_containing_ragged_feature_with_no_partitions(tmp_path):
    payloads = serialized([
        example({"rt_c": floats([3, 4])}),
        example({"rt_c": floats([])}),
        example({"rt_d": empty()}),
        example({"rt_c": floats([1, 2, -1]), "rt_d": strings([b"hi"])}),
    ])
    features = {"rt_c": io.RaggedFeature(dtype=tf.float32),
                "rt_d": io.RaggedFeature(dtype=tf.string, row_splits_dtype=tf.int64)}
    want = check_examples(tmp_path, payloads * 64, features)  # a batch big enough for several minibatches
    assert [w["rt_c"] for w in want[:4]] == [[3, 4], [], [], [1, 2, -1]]


def test_serialized_containing_ragged_feature(tmp_path):
    payloads = serialized([
        example({"rt_values": floats([3, 4, 5, 6]), "rt_splits": ints([0, 1, 4]), "rt_lengths": ints([1, 3]),
                 "rt_starts": ints([0, 1]), "rt_limits": ints([1, 4]), "rt_rowids": ints([0, 1, 1, 1])}),
        example({"rt_values": floats([]), "rt_splits": ints([0]), "rt_lengths": ints([]),
                 "rt_starts": ints([]), "rt_limits": ints([]), "rt_rowids": ints([])}),
        example({"rt_values": empty(), "rt_splits": ints([0]), "rt_lengths": empty(),  # features with nothing in them
                 "rt_starts": empty(), "rt_limits": empty(), "rt_rowids": empty()}),
        example({"rt_values": floats([1, 2, -1, 8, 9, 5]), "rt_splits": ints([0, 3, 3, 5, 6]),
                 "rt_lengths": ints([3, 0, 2, 1]), "rt_starts": ints([0, 3, 3, 5]),
                 "rt_limits": ints([3, 3, 5, 6]), "rt_rowids": ints([0, 0, 0, 2, 2, 3])}),
    ])
    R = io.RaggedFeature

    def ragged(*partitions):
        return R(value_key="rt_values", partitions=list(partitions), dtype=tf.float32)

    features = {
        "rt1": ragged(R.RowSplits("rt_splits")), "rt2": ragged(R.RowLengths("rt_lengths")),
        "rt3": ragged(R.RowStarts("rt_starts")), "rt4": ragged(R.RowLimits("rt_limits")),
        "rt5": ragged(R.ValueRowIds("rt_rowids")), "uniform1": ragged(R.UniformRowLength(2)),
        "uniform2": ragged(R.UniformRowLength(2), R.RowSplits("rt_splits")),
    }
    want = check_examples(tmp_path, payloads, features)
    assert [w["rt1"] for w in want] == [[[3], [4, 5, 6]], [], [], [[1, 2, -1], [], [8, 9], [5]]]
    assert want[3]["uniform2"] == [[[1, 2, -1], []], [[8, 9], [5]]]


def test_serialized_containing_nested_ragged_feature(tmp_path):
    payloads = serialized([
        example({"rt_values": floats([1, 2, 3, 4, 5, 6, 7]), "lengths_axis2": ints([1, 2, 0, 1]),
                 "lengths_axis3": ints([1, 2, 1, 3]), "splits_axis3": ints([0, 1, 3, 4, 7])}),
        example({"rt_values": floats([1, 2, 3, 4, 5, 6, 7, 8]), "lengths_axis2": ints([2, 3]),
                 "lengths_axis3": ints([3, 1, 1, 1, 2]), "splits_axis3": ints([0, 3, 4, 5, 6, 8])}),
    ])
    R = io.RaggedFeature
    features = {"rt1": R(value_key="rt_values", partitions=[R.UniformRowLength(2), R.RowLengths("lengths_axis2"),
                                                            R.RowSplits("splits_axis3")],
                         dtype=tf.float32, row_splits_dtype=tf.int64)}
    want = check_examples(tmp_path, payloads, features)
    assert want[0]["rt1"] == [[[[1]], [[2, 3], [4]]], [[], [[5, 6, 7]]]]


def test_serialized_containing_misaligned_ragged_feature_row_lengths(tmp_path):
    payloads = serialized([example({"rt_values": floats([]), "rt_lengths": ints([5])}),
                           example({"rt_values": floats([1, 2, 3, 4, 5]), "rt_lengths": ints([])})])
    R = io.RaggedFeature
    features = {"rt": R(value_key="rt_values", partitions=[R.RowLengths("rt_lengths")], dtype=tf.float32,
                        validate=True)}
    refused(tmp_path, payloads, features, match="'rt_lengths'.*do not add up")


# ParseSingleExampleTest


def test_single_example_with_sparse_and_sparse_feature_and_dense(tmp_path):
    payload = example({"c": floats([3, 4]), "d": floats([0.0, 1.0]), "val": strings([b"a", b"b"]),
                       "idx": ints([0, 3]), "st_a": floats([3.0, 4.0])}).SerializeToString()
    features = {
        "st_a": io.VarLenFeature(tf.float32),
        "sp": io.SparseFeature(["idx"], "val", tf.string, [13]),
        "a": io.FixedLenFeature((1, 3), tf.int64, default_value=[1, 2, 3]),
        "b": io.FixedLenFeature((3, 3), tf.string, default_value=random_bytes((3, 3))),
        "c": io.FixedLenFeature(2, tf.float32),  # an int shape: [2]
        "d": io.FixedLenSequenceFeature([], tf.float32, allow_missing=True),
    }
    (want,) = check_examples(tmp_path, [payload], features)
    assert want["c"] == [3, 4] and want["sp"][3] == b"b"


def test_single_example_with_all_feature_types(tmp_path):
    payload = example({
        "c": floats([3, 4]), "d": floats([0.0, 1.0]), "val": strings([b"a", b"b"]), "idx": ints([0, 3]),
        "st_a": floats([3.0, 4.0]), "rt_1d": floats([3.0, 4.0]), "rt_values": floats([5, 6, 7]),
        "rt_splits": ints([0, 1, 1, 3]), "rt_lengths": ints([1, 0, 2]), "rt_starts": ints([0, 1, 1]),
        "rt_limits": ints([1, 1, 3]), "rt_rowids": ints([0, 2, 2]), "rt_splits2": ints([0, 2, 3]),
    }).SerializeToString()
    R = io.RaggedFeature

    def ragged(*partitions):
        return R(value_key="rt_values", partitions=list(partitions), dtype=tf.float32)

    features = {
        "st_a": io.VarLenFeature(tf.float32),
        "sp": io.SparseFeature(["idx"], "val", tf.string, [13]),
        "a": io.FixedLenFeature((1, 3), tf.int64, default_value=[1, 2, 3]),
        "b": io.FixedLenFeature((3, 3), tf.string, default_value=random_bytes((3, 3))),
        "c": io.FixedLenFeature(2, tf.float32),
        "d": io.FixedLenSequenceFeature([], tf.float32, allow_missing=True),
        "rt_1d": R(tf.float32),
        "rt_2d_with_splits": ragged(R.RowSplits("rt_splits")),
        "rt_2d_with_lengths": ragged(R.RowLengths("rt_lengths")),
        "rt_2d_with_starts": ragged(R.RowStarts("rt_starts")),
        "rt_2d_with_limits": ragged(R.RowLimits("rt_limits")),
        "rt_2d_with_rowids": ragged(R.ValueRowIds("rt_rowids")),
        "rt_2d_with_uniform_row_length": ragged(R.UniformRowLength(1)),
        "rt_3d": ragged(R.RowSplits("rt_splits2"), R.RowSplits("rt_splits")),
        "rt_3d_with_uniform_row_length": ragged(R.UniformRowLength(1), R.RowSplits("rt_splits")),
    }
    (want,) = check_examples(tmp_path, [payload], features)
    assert want["rt_3d"] == [[[5], []], [[6, 7]]]


# ParseSequenceExampleTest


def test_create_sequence_example(tmp_path):
    """The SequenceExample TF's test builds, written by make_sequence_example: TF reads it back."""
    payload = make_sequence_example(
        {"global_feature": np.array([1, 2, 3], np.float32)},
        {"repeated_feature_2_frames": [[b"a", b"b", b"c"], [b"a", b"d", b"e"]],
         "repeated_feature_3_frames": [[3, 4, 5, 6, 7], [-1, 0, 0, 0, 0], [1, 2, 3, 4, 5]]})
    context = {"global_feature": io.FixedLenFeature([3], tf.float32)}
    sequence = {"repeated_feature_2_frames": io.FixedLenSequenceFeature([3], tf.string),
                "repeated_feature_3_frames": io.FixedLenSequenceFeature([5], tf.int64)}
    ((c, s),) = check_sequences(tmp_path, [payload], context, sequence)
    assert c["global_feature"] == [1, 2, 3] and s["repeated_feature_3_frames"][1] == [-1, 0, 0, 0, 0]


@pytest.mark.parametrize("shape", [[0], [-1]])
def test_fixed_len_sequence_feature_invalid_shapes(tmp_path, shape):
    """TF's newest FixedLenSequenceFeature refuses these shapes when built; the
    installed TF takes them, refuses [-1] when parsing, and divides by zero
    on [0] (TF issue 123476, a crash of the process), so only [-1] asks TF."""
    path = write(tmp_path, [make_sequence_example({}, {"x": [np.zeros(1, np.float32)]})])
    if shape == [-1]:
        with pytest.raises(ValueError, match="Dimension -1 must be >= 0"):
            io.parse_single_sequence_example(path.read_bytes()[12:-4], sequence_features={
                "x": io.FixedLenSequenceFeature(shape=shape, dtype=tf.float32)})
    spec = {"x": tfspec.FixedLenSequenceFeature(shape, "float32", allow_missing=True)}
    with pytest.raises(ValueError, match="'x'"):
        TFRecordDataset(path, sequence_features=spec)
    with pytest.raises(ValueError, match="'x'"):
        TFRecordDataset(path, features=spec)


def test_sequence_example_with_sparse_and_dense_context(tmp_path):
    payload = sequence_example(context={"c": floats([3, 4]), "st_a": floats([3.0, 4.0])}).SerializeToString()
    context = {
        "st_a": io.VarLenFeature(tf.float32),
        "a": io.FixedLenFeature((1, 3), tf.int64, default_value=[[1, 2, 3]]),
        "b": io.FixedLenFeature((3, 3), tf.string, default_value=random_bytes((3, 3))),
        "c": io.FixedLenFeature((2,), tf.float32),  # required
    }
    want_c, _ = check_examples_of_context(tmp_path, payload, context)
    assert want_c["st_a"] == [3, 4]


def check_examples_of_context(tmp_path, payload, context):
    """A SequenceExample with a context only: read with features= (it is an
    Example on the wire) and with parse_sequence_example(context_features=)."""
    want_c, want_s = tf_sequence(payload, context, None)
    path = write(tmp_path, [payload])
    (item,) = list(TFRecordDataset(path, features=context))
    assert ours(item, context) == want_c
    got_c, got_s = parse_sequence_example(payload, context)
    assert ours(got_c, context) == want_c and got_s == {}
    return want_c, want_s


def test_sequence_example_with_multiple_size_feature_lists(tmp_path):
    payload = sequence_example(feature_lists={
        "a": [ints([-1, 0, 1]), ints([2, 3, 4]), ints([5, 6, 7]), ints([8, 9, 10])],
        "b": [strings([b"r00", b"r01", b"r10", b"r11"])],
        "c": [floats([3, 4]), floats([-1, 2])],
    }).SerializeToString()
    sequence = {
        "a": io.FixedLenSequenceFeature((1, 3), tf.int64),
        "b": io.FixedLenSequenceFeature((2, 2), tf.string),
        "c": io.FixedLenSequenceFeature(2, tf.float32),
        "d": io.FixedLenSequenceFeature((5,), tf.float32, allow_missing=True),
    }
    ((_, s),) = check_sequences(tmp_path, [payload], None, sequence)
    assert s["b"] == [[b"r00", b"r01", b"r10", b"r11"]] and s["d"] == []


SPARSE_LISTS = {
    "a": [ints([3, 4]), ints([1, 0])],
    "st_a": [floats([3.0, 4.0]), floats([5.0]), floats([])],
    "st_b": [strings([b"a"]), strings([]), strings([]), strings([b"b", b"c"])],
}
SPARSE_SEQUENCE = {
    "st_a": io.VarLenFeature(tf.float32),
    "st_b": io.VarLenFeature(tf.string),
    "st_c": io.VarLenFeature(tf.int64),
    "a": io.FixedLenSequenceFeature((2,), tf.int64),
}


def test_sequence_example_without_debug_name(tmp_path):
    payload = sequence_example(feature_lists=SPARSE_LISTS).SerializeToString()
    ((_, s),) = check_sequences(tmp_path, [payload], None, SPARSE_SEQUENCE)
    assert s["st_a"] == [[3, 4], [5], []] and s["st_b"] == [[b"a"], [], [], [b"b", b"c"]] and s["st_c"] == []


def test_sequence_example_with_sparse_and_dense_feature_lists(tmp_path):
    payloads = [sequence_example(feature_lists=SPARSE_LISTS).SerializeToString(),
                sequence_example(feature_lists={"a": [ints([5, 6])], "st_c": [ints([1, 2, 3])]}).SerializeToString()]
    want = check_sequences(tmp_path, payloads, None, SPARSE_SEQUENCE)
    assert want[1][1]["st_c"] == [[1, 2, 3]]
    # batch parsing with the same description: batch mode's values
    context, lists, lengths = parse_sequence_example_batch(payloads, None, SPARSE_SEQUENCE)
    assert context == {} and lengths["st_a"].tolist() == [3, 0] and plain(lists["st_b"][0]) == want[0][1]["st_b"]


def test_sequence_example_with_empty_feature_in_feature_lists(tmp_path):
    payload = sequence_example(feature_lists={"st_a": [floats([3.0, 4.0]), empty(), floats([5.0])]}
                               ).SerializeToString()
    ((_, s),) = check_sequences(tmp_path, [payload], None, {"st_a": io.VarLenFeature(tf.float32)})
    assert s["st_a"] == [[3, 4], [], [5]]


@pytest.mark.parametrize("lists, step", [
    ({"a": [ints([-1, 0]), floats([2, 3])]}, 1),  # testSequenceExampleListWithInconsistentDataFails
    ({"a": [floats([2, 3])]}, 0),  # testSequenceExampleListWithWrongDataTypeFails
    ({"a": [ints([3, 4]), ints([1, 2]), floats([2.0, 3.0])]}, 2),  # ...WithWrongSparseDataTypeFails
    ({"a": [ints([2, 3]), ints([2, 3, 4])]}, 1),  # testSequenceExampleListWithWrongShapeFails
    ({"a": [ints([2]), ints([2, 3, 4])]}, 0),  # testSequenceExampleListWithWrongShapeFails2
], ids=["inconsistent_data", "wrong_data_type", "wrong_sparse_data_type", "wrong_shape", "wrong_shape2"])
def test_sequence_example_list_with_bad_steps_fails(tmp_path, lists, step):
    payload = sequence_example(feature_lists=lists).SerializeToString()
    refused_sequence(tmp_path, payload, {"a": io.FixedLenSequenceFeature((2,), tf.int64)},
                     match=f"'a'.*step {step} holds")


def test_sequence_example_with_missing_feature_list_fails(tmp_path):
    payload = sequence_example().SerializeToString()
    refused_sequence(tmp_path, payload, {"a": io.FixedLenSequenceFeature((2,), tf.int64)},
                     match="'a'.*required feature list is missing")


def test_sequence_example_batch(tmp_path):
    first = sequence_example(feature_lists={"a": [ints([-1, 0, 1]), ints([2, 3, 4]), ints([5, 6, 7]),
                                                  ints([8, 9, 10])]})
    second = sequence_example(context={"c": floats([7])},
                              feature_lists={"a": [ints([21, 2, 11])], "b": [ints([5])]})
    payloads = serialized([first, second])
    context = {"c": io.FixedLenFeature((), tf.float32, default_value=-1)}
    sequence = {
        "a": io.FixedLenSequenceFeature((1, 3), tf.int64),
        "b": io.FixedLenSequenceFeature((), tf.int64, allow_missing=True),
        "d": io.FixedLenSequenceFeature((5,), tf.float32, allow_missing=True),
    }
    check_sequences(tmp_path, payloads, context, sequence)
    want_c, want_s, want_len = io.parse_sequence_example(payloads, context_features=context,
                                                         sequence_features=sequence)
    path = write(tmp_path, payloads, "batch.tfrecord")
    (batch,) = list(TFRecordDataset(path, features=context, sequence_features=sequence, batch_size=2))
    got_c, got_s, got_len = parse_sequence_example_batch(payloads, context, sequence)
    for k in sequence:  # padded with 0 to the longest list, as TF pads
        assert plain(batch[k]) == plain(got_s[k]) == plain(want_s[k]), k
        assert batch[f"{k}_length"].tolist() == got_len[k].tolist() == want_len[k].numpy().tolist(), k
    assert plain(batch["c"]) == plain(got_c["c"]) == plain(want_c["c"]) == [-1, 7]


def test_sequence_serialized_containing_ragged_feature_with_no_partitions(tmp_path):
    payloads = serialized([
        sequence_example(context={"a": floats([3, 4])},
                         feature_lists={"b": [floats([5]), floats([3])], "c": [ints([6, 7, 8, 9])]}),
        sequence_example(context={"a": floats([9])},
                         feature_lists={"b": [], "c": [ints([]), ints([1, 2, 3])]}),
        sequence_example(feature_lists={"b": [floats([1]), floats([1, 2]), floats([1, 2, 3])]}),
        sequence_example(context={"a": empty()}, feature_lists={"b": [empty()], "c": [ints([3, 3, 3])]}),
    ])
    context = {"a": io.RaggedFeature(dtype=tf.float32)}
    sequence = {"b": io.RaggedFeature(dtype=tf.float32),
                "c": io.RaggedFeature(dtype=tf.int64, row_splits_dtype=tf.int64)}
    want = check_sequences(tmp_path, payloads * 16, context, sequence)
    assert [s["b"] for _, s in want[:4]] == [[[5], [3]], [], [[1], [1, 2], [1, 2, 3]], [[]]]


def test_sequence_serialized_containing_nested_ragged_feature(tmp_path):
    payloads = serialized([
        sequence_example(
            context={"a_values": floats([1, 2, 3, 4, 5, 6, 7]), "a_lengths_axis2": ints([1, 2, 0, 1]),
                     "a_lengths_axis3": ints([1, 2, 1, 3]), "a_splits_axis3": ints([0, 1, 3, 4, 7])},
            feature_lists={"b_values": [floats([1, 2, 3, 4]), floats([2, 4, 6])],
                           "b_splits": [ints([0, 1, 4]), ints([0, 2, 3])]}),
        sequence_example(),
        sequence_example(
            context={"a_values": floats([1, 2, 3, 4, 5, 6, 7, 8]), "a_lengths_axis2": ints([2, 3]),
                     "a_lengths_axis3": ints([3, 1, 1, 1, 2]), "a_splits_axis3": ints([0, 3, 4, 5, 6, 8])},
            feature_lists={"b_values": [floats([9, 8, 7, 6, 5]), floats([4, 3, 2, 1]), floats([0])],
                           "b_splits": [ints([0, 1, 4, 5]), ints([0, 4]), ints([0, 1])]}),
    ])
    R = io.RaggedFeature
    context = {"a": R(value_key="a_values", partitions=[R.UniformRowLength(2), R.RowLengths("a_lengths_axis2"),
                                                        R.RowSplits("a_splits_axis3")],
                      dtype=tf.float32, row_splits_dtype=tf.int64)}
    sequence = {"b": R(value_key="b_values", dtype=tf.float32, partitions=[R.RowSplits("b_splits")]),
                "c": R(value_key="b_values", dtype=tf.float32, partitions=[R.UniformRowLength(1)])}
    # TF's single-record parser fails on the empty record here (its test parses only the first one
    # singly): the batch parser's rows are the oracle
    want = check_sequences(tmp_path, payloads, context, sequence, oracle=tf_sequence_rows)
    assert want[0][1]["b"] == [[[1], [2, 3, 4]], [[2, 4], [6]]] and want[1][1]["b"] == []
    assert want[2][1]["c"][2] == [[0]]


def test_sequence_serialized_containing_misaligned_nested_ragged_feature(tmp_path):
    payload = sequence_example(feature_lists={"b_values": [floats([1, 2, 3, 4]), floats([2, 4, 6])],
                                              "b_splits": [ints([0, 1, 4])]}).SerializeToString()
    R = io.RaggedFeature
    sequence = {"b": R(value_key="b_values", dtype=tf.float32, partitions=[R.RowSplits("b_splits")],
                       validate=True)}
    refused_sequence(tmp_path, payload, sequence, match="'b_splits'.*not aligned")


def test_fixed_len_sequence_feature_zero_dim_does_not_crash(tmp_path):
    """A zero step dimension is refused with a ValueError (TF's newest
    constructor refuses it; the installed TF's parser divides by zero)."""
    path = write(tmp_path, [make_sequence_example({"x": np.zeros(2, np.float32)},
                                                  {"x": [np.zeros(1, np.float32)]})])
    spec = {"x": tfspec.FixedLenSequenceFeature([0], "float32", allow_missing=True)}
    for kwargs in ({"features": spec}, {"sequence_features": spec}):
        with pytest.raises(ValueError, match="dimensions must be positive"):
            TFRecordDataset(path, **kwargs)


# Descriptions TF accepts that its tests above do not spell


@pytest.mark.parametrize("default", [[[b"a", "b"], [b"c", b"d"]], np.array([[b"a", b"b"], [b"c", b"d"]]),
                                     np.array([["a", "b"], ["c", "d"]])], ids=["nested list", "bytes array",
                                                                            "str array"])
def test_string_fixed_len_feature_default_of_its_shape(tmp_path, default):
    payloads = serialized([example({"s": strings([b"w", b"x", b"y", b"z"])}), example({})])
    want = check_examples(tmp_path, payloads, {"s": io.FixedLenFeature((2, 2), tf.string, default_value=default)})
    assert [w["s"] for w in want] == [[b"w", b"x", b"y", b"z"], [b"a", b"b", b"c", b"d"]]


def test_parse_example_batch_with_a_description_gives_batch_mode_values(tmp_path):
    from tfrecord_torch import parse_example_batch

    payloads = serialized([example({"a": floats([1, 2]), "v": ints([1, 2, 3]), "s": strings([b"x"])}),
                           example({"a": floats([3, 4]), "v": ints([]), "s": strings([b"y"])})])
    features = {"a": io.FixedLenFeature(2, tf.float32), "v": io.VarLenFeature(tf.int64),
                "s": io.FixedLenFeature([], tf.string)}
    want = [tf_example(p, features) for p in payloads]
    batch = parse_example_batch(payloads, features)
    (mode,) = list(TFRecordDataset(write(tmp_path, payloads), features=features, batch_size=2))
    for k in features:
        assert plain(batch[k]) == plain(mode[k]) == [w[k] for w in want], k
    assert tuple(batch["a"].shape) == (2, 2)
    assert parse_example_batch(payloads)["a"].tolist() == [[1, 2], [3, 4]]  # no description: the raw columns


def test_sequence_varlen_and_ragged_features_in_every_reader(tmp_path):
    """VarLen and Ragged feature lists (strings, numbers, partitions) read by
    the datasets, map-style, batch mode and the parse functions, as TF reads them."""
    payloads = serialized([
        sequence_example(context={"n": ints([2])},
                         feature_lists={"w": [strings([b"a", b"b"]), strings([])], "v": [ints([1]), ints([2, 3])],
                                        "q": [strings([b"c"]), empty()], "r": [ints([1]), ints([2, 3])],
                                        "lens": [ints([1, 0]), ints([2, 0])]}),
        sequence_example(context={"n": ints([0])}),
    ])
    R = io.RaggedFeature
    sequence = {"w": io.VarLenFeature(tf.string), "v": io.VarLenFeature(tf.int64), "q": R(tf.string),
                "rows": R(tf.int64, value_key="r", partitions=[R.RowLengths("lens")])}
    want = check_sequences(tmp_path, payloads, {"n": io.FixedLenFeature([], tf.int64)}, sequence)
    assert want[0][1]["rows"] == [[[1], []], [[2, 3], []]] and want[1][1]["w"] == []
    assert want[0][1]["q"] == [[b"c"], []]
    _, lists, lengths = parse_sequence_example_batch(payloads, {"n": io.FixedLenFeature([], tf.int64)}, sequence)
    assert lengths["w"].tolist() == [2, 0] and plain(lists["rows"][0]) == want[0][1]["rows"]


def test_inspect_prints_sequence_descriptions_tf_accepts(tmp_path, capsys):
    """`tfrecord-torch inspect` of feature lists with steps of different
    widths prints a description TF accepts (a VarLenFeature) and a spec of
    ours; both read back TF's values."""
    from tfrecord_torch import Bytes, Float, Int64  # noqa: F401 -- the printed spec's names
    from tfrecord_torch.cli import main

    payloads = [make_sequence_example({"label": i}, {"tokens": [np.arange(j + i, dtype=np.int64) for j in range(3)],
                                                     "words": [[b"a"] * (i + 1), [b"b"]],
                                                     "frames": [np.zeros(2, np.float32)] * i})
                for i in range(3)]
    path = write(tmp_path, payloads)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    described, spec = {}, {}
    exec(out.split("sequence_features=...) also takes):\n")[1].split("\ntfrecord_torch spec")[0], {"tf": tf},
         described)
    exec(out.split("sequence_features=sequence_features)):\n")[1], {**globals(), **locals()}, spec)
    assert type(described["sequence_features"]["tokens"]).__name__ == "VarLenFeature"
    want = check_sequences(tmp_path, payloads, described["context_features"], described["sequence_features"])
    assert want[2][1]["tokens"] == [[0, 1], [0, 1, 2], [0, 1, 2, 3]]
    items = list(TFRecordDataset(path, features=spec["features"], sequence_features=spec["sequence_features"]))
    for item, (c, s) in zip(items, want):
        assert plain(item["label"]) == c["label"] and all(plain(item[k]) == s[k] for k in s)


# DecodeRawTest


@pytest.mark.parametrize("decode_raw", [tf.compat.v1.decode_raw, tf.io.decode_raw], ids=["v1", "v2_fallback"])
def test_decode_raw_equal_length(tmp_path, decode_raw):
    """testDecodeRawV1EqualLength, testDecodeRawV2FallbackEqualLength: bytes
    features read as uint8 by ``RawTensor``, as ``decode_raw`` reads them."""
    from tfrecord_torch import RawTensor

    words = [b"string1", b"string2"]
    want = decode_raw(tf.constant(words), tf.uint8).numpy()
    path = write(tmp_path, serialized([example({"w": strings([w])}) for w in words]))
    got = [item["w"] for item in TFRecordDataset(path, features={"w": RawTensor(dtype="uint8")})]
    assert [g.numpy().tolist() for g in got] == want.tolist() == [list(w) for w in words]
