"""TensorFlow as the oracle for feature descriptions: the same serialized
records parsed by ``tf.io`` and read by this library (the datasets, the
map-style dataset, batch mode and the parse functions), compared as plain
nested lists."""

import math

import numpy as np
import tensorflow as tf
import torch

from tfrecord_torch import (
    IndexedTFRecordDataset,
    RecordWriter,
    TFRecordDataset,
    parse_example,
    parse_sequence_example,
)

Example = tf.train.Example
SequenceExample = tf.train.SequenceExample


def example(features=None):
    return Example(features=tf.train.Features(feature=features or {}))


def sequence_example(context=None, feature_lists=None):
    return SequenceExample(context=tf.train.Features(feature=context or {}),
                           feature_lists=tf.train.FeatureLists(feature_list={
                               k: tf.train.FeatureList(feature=v) for k, v in (feature_lists or {}).items()}))


def floats(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def strings(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def empty():
    """A Feature with no kind set (what TF writes for a feature with nothing in it)."""
    return tf.train.Feature()


def write(tmp_path, payloads, name="records.tfrecord"):
    path, n = tmp_path / name, 0
    while path.exists():  # one test may write several files
        n += 1
        path = tmp_path / f"{n}-{name}"
    with RecordWriter(path) as w:
        for p in payloads:
            w.write(p)
    return path


def plain(value):
    """Nested Python lists of a value of ours or TF's (dtype aside: :func:`dtypes` checks it)."""
    if isinstance(value, tf.RaggedTensor):
        return value.to_list()
    if isinstance(value, (tf.Tensor, torch.Tensor)):
        return value.numpy().tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _kind(desc):
    return type(desc).__name__


def _string(desc):
    return desc.dtype == tf.string


def _steps(array, shape):
    """TF's string array [N, *shape] as ours: N lists of prod(shape) bytes (a list of N bytes for shape [])."""
    shape = tuple(tf.TensorShape(shape).as_list())
    if not shape:
        return array.tolist()
    return array.reshape(-1, math.prod(shape)).tolist()


def tf_value(value, desc, sequence=False):
    """TF's parsed value of one feature as this library gives it, as plain lists."""
    kind = _kind(desc)
    if kind == "SparseFeature":
        return tf.sparse.to_dense(value, default_value=b"" if _string(desc) else None).numpy().tolist()
    if kind == "VarLenFeature":
        if sequence:  # [T, None] rows, one per step
            return tf.RaggedTensor.from_sparse(value).to_list()
        return value.values.numpy().tolist()
    if kind == "FixedLenFeature" and _string(desc):
        array = np.asarray(value.numpy(), dtype=object)
        return array.reshape(-1).tolist() if array.ndim else array.item()
    if kind == "FixedLenSequenceFeature" and _string(desc):
        return _steps(value.numpy(), desc.shape)
    return plain(value)


def tf_example(payload, features):
    out = tf.io.parse_single_example(payload, features)
    return {k: tf_value(out[k], features[k]) for k in features}


def tf_sequence(payload, context, sequence):
    ctx, lists = tf.io.parse_single_sequence_example(payload, context_features=context or None,
                                                     sequence_features=sequence or None)
    return ({k: tf_value(ctx[k], d) for k, d in (context or {}).items()},
            {k: tf_value(lists[k], d, sequence=True) for k, d in (sequence or {}).items()})


def tf_sequence_rows(payloads, context, sequence):
    """:func:`tf_sequence` of each record from ``tf.io.parse_sequence_example``
    of them all (RaggedFeatures only: a ragged batch's rows are the records')."""
    ctx, lists, _ = tf.io.parse_sequence_example(payloads, context_features=context or None,
                                                 sequence_features=sequence or None)
    assert all(type(d).__name__ == "RaggedFeature" for d in {**(context or {}), **sequence}.values())
    ctx_rows = {k: ctx[k].to_list() for k in context or {}}
    list_rows = {k: lists[k].to_list() for k in sequence}
    return [({k: v[i] for k, v in ctx_rows.items()}, {k: v[i] for k, v in list_rows.items()})
            for i in range(len(payloads))]


def ours(item, keys):
    return {k: plain(item[k]) for k in keys}


def dtypes(item, want, features):
    """Numeric tensors of ours have TF's dtype (float32 / int64)."""
    for k, desc in features.items():
        if isinstance(item[k], torch.Tensor) and desc.dtype != tf.string:
            assert str(item[k].dtype).split(".")[1] == desc.dtype.name, k


def check_examples(tmp_path, payloads, features):
    """Every reader of ours gives each record's values as ``tf.io.parse_single_example``."""
    want = [tf_example(p, features) for p in payloads]
    path = write(tmp_path, payloads)
    streamed = list(TFRecordDataset(path, features=features))
    mapped = IndexedTFRecordDataset(path, features=features)
    assert len(streamed) == len(mapped) == len(payloads)
    for i, payload in enumerate(payloads):
        for got in (streamed[i], mapped[i], parse_example(payload, features)):
            assert ours(got, features) == want[i], f"record {i}"
            dtypes(got, want[i], features)
    return want


def check_sequences(tmp_path, payloads, context, sequence, *, batch=True, oracle=None):
    """The same for SequenceExamples and ``tf.io.parse_single_sequence_example``
    (or ``oracle(payloads, context, sequence)``); batch mode's rows (padding
    cut at ``<key>_length``) equal them too."""
    want = oracle(payloads, context, sequence) if oracle else [tf_sequence(p, context, sequence) for p in payloads]
    path = write(tmp_path, payloads)
    kwargs = {"features": context, "sequence_features": sequence}
    streamed = list(TFRecordDataset(path, **kwargs))
    mapped = IndexedTFRecordDataset(path, **kwargs)
    for i, payload in enumerate(payloads):
        want_c, want_s = want[i]
        for got in (streamed[i], mapped[i]):
            assert ours(got, context or {}) == want_c, f"record {i}"
            assert ours(got, sequence) == want_s, f"record {i}"
        got_c, got_s = parse_sequence_example(payload, context, sequence)
        assert ours(got_c, context or {}) == want_c and ours(got_s, sequence) == want_s, f"record {i}"
    if batch:
        (rows,) = list(TFRecordDataset(path, batch_size=len(payloads), **kwargs))
        for k in sequence:
            lengths = rows[f"{k}_length"].tolist()
            got = [plain(v)[:n] for v, n in zip(rows[k], lengths)]
            assert got == [s[k] for _, s in want], k
    return want
