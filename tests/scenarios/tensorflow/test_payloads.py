"""Records that are not Examples, written by TensorFlow's ``tf.io.TFRecordWriter`` (the framing
Apache Beam's ``WriteToTFRecord`` writes around whatever its coder gives): JSON documents, random
bytes (empty records, a 2 MB one, records across the reader's blocks) and a protobuf of another
type. Read with ``features=Payload()``, every dataset and mode gives, record for record, what
``tf.data.TFRecordDataset`` reads; ``Payload(decode=...)`` gives the hook applied to those bytes.
"""

import json

import numpy as np
import pytest
import tensorflow as tf
import torch
from google.protobuf.timestamp_pb2 import Timestamp
from torch.utils.data import DataLoader

from tfrecord_torch import (
    CorruptRecordError,
    FeatureError,
    Float,
    IndexedTFRecordDataset,
    Int64,
    Payload,
    Shuffling,
    Source,
    TFRecordDataset,
    parse_tensor,
)

from .common import mixed_payloads, tf_read, tf_write

TF_OPTIONS = {None: None, "gzip": "GZIP"}


def json_payloads(n=60):
    return [json.dumps({"id": i, "name": f"row {i}", "tags": ["a"] * (i % 4), "score": i / 7}).encode()
            for i in range(n)]


def proto_payloads(n=25):
    return [Timestamp(seconds=1_700_000_000 + i, nanos=i * 1000).SerializeToString() for i in range(n)]


def write(tmp_path, compression):
    """Three shards by TensorFlow: JSON, random bytes, protos; their paths."""
    suffix = ".gz" if compression else ""
    paths = []
    for name, payloads in [("json", json_payloads()), ("bytes", mixed_payloads()), ("proto", proto_payloads())]:
        path = tmp_path / f"{name}.tfrecord{suffix}"
        tf_write(path, payloads, TF_OPTIONS[compression])
        paths.append(path)
    return paths


def oracle(paths, compression):
    return [r for p in paths for r in tf_read(p, TF_OPTIONS[compression])]


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("batch_size", [None, 7])
def test_payloads_read_as_tensorflow_reads_them(tmp_path, compression, batch_size):
    paths = write(tmp_path, compression)
    want = oracle(paths, compression)
    ds = TFRecordDataset([str(p) for p in paths], features=Payload(), batch_size=batch_size)
    got = list(ds) if batch_size is None else [r for batch in ds for r in batch]
    assert all(type(r) is bytes for r in got)
    assert got == want


@pytest.mark.parametrize("source", [Source(), Source(index=False)], ids=["indexed", "streamed"])
def test_shuffled_payloads_are_tensorflows_records_in_another_order(tmp_path, source):
    paths = write(tmp_path, None)
    want = oracle(paths, None)
    ds = TFRecordDataset(paths, features=Payload(), shuffle=Shuffling(block=4), source=source, seed=5)
    got = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert got != want
    assert sorted(got) == sorted(want)


def test_map_style_payloads_are_tensorflows_records(tmp_path):
    paths = write(tmp_path, None)
    want = oracle(paths, None)
    ds = IndexedTFRecordDataset(paths, features=Payload())
    assert len(ds) == len(want)
    assert [ds[i] for i in range(len(ds))] == want
    order = list(range(len(want)))[::-3] + [0, 0, 5]
    assert ds.__getitems__(order) == [want[i] for i in order]
    batches = list(DataLoader(ds, batch_size=16))  # default_collate keeps a batch of bytes a list
    assert [r for b in batches for r in b] == want


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_decode_hooks_give_what_they_make_of_tensorflows_records(tmp_path, compression):
    paths = write(tmp_path, compression)
    texts = TFRecordDataset(paths[0], features=Payload(decode=json.loads))
    assert list(texts) == [json.loads(r) for r in tf_read(paths[0], TF_OPTIONS[compression])]
    protos = TFRecordDataset(paths[2], features=Payload(decode=Timestamp.FromString), batch_size=10)
    want = [Timestamp.FromString(r) for r in tf_read(paths[2], TF_OPTIONS[compression])]
    assert [t for batch in protos for t in batch] == want
    if compression is None:
        indexed = IndexedTFRecordDataset(paths[2], features=Payload(decode=Timestamp.FromString))
        assert [indexed[i] for i in range(len(indexed))] == want


def test_tensorflows_example_reader_refuses_these_records_too(tmp_path):
    """The oracle agrees the JSON records are no Examples: tf.io.parse_single_example fails on them."""
    paths = write(tmp_path, None)
    record = tf_read(paths[0])[0]
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.parse_single_example(record, {"id": tf.io.FixedLenFeature([], tf.int64)})


def tensor_values():
    """Tensors of several dtypes and shapes, a scalar and a string among them."""
    return [tf.reshape(tf.range(6, dtype=tf.float32) + i, (2, 3)) for i in range(5)] + \
           [tf.constant(7, tf.int64), tf.constant([b"a", b"bc"]), tf.zeros((0, 4), tf.int32)]


def write_tensors(path, compression=None):
    """TensorFlow writes records that are serialized tensors (no Example around them)."""
    tf_write(path, [tf.io.serialize_tensor(t).numpy() for t in tensor_values()], TF_OPTIONS[compression])
    return path


@pytest.mark.parametrize("reader", ["records", "spec", "batches", "batches-spec", "streamed", "gzip", "indexed",
                                    "indexed-spec"])
def test_serialized_tensors_read_as_examples_raise_naming_parse_tensor(tmp_path, reader):
    """Records of tf.io.serialize_tensor read without Payload parse as Examples with no
    features (a TensorProto's fields are unknown to Example): not an empty dict per
    record, nor a missing key, but an error naming the record and the way to read them."""
    path = write_tensors(tmp_path / ("t.tfrecord.gz" if reader == "gzip" else "t.tfrecord"),
                         "gzip" if reader == "gzip" else None)
    spec = {"x": Float()} if reader.endswith("spec") else None
    hint = (r"record 0 at byte offset 0: the record is a serialized tensor \(dtype float, shape \[2, 3\]\), "
            r"tf.io.serialize_tensor's TensorProto, not a tf.train.Example.*features=Payload\(decode=parse_tensor\)")
    with pytest.raises(CorruptRecordError, match=hint):
        if reader.startswith("indexed"):
            IndexedTFRecordDataset(path, features=spec)[0]
        else:
            source = Source(index=False) if reader == "streamed" else None
            list(TFRecordDataset(path, features=spec, source=source,
                                 batch_size=4 if reader.startswith("batches") else None))


def test_serialized_tensors_read_with_payload_parse_tensor_are_tensorflows(tmp_path):
    """The remedy the error names gives, record for record, what tf.io.parse_tensor gives."""
    path = write_tensors(tmp_path / "t.tfrecord")
    got = list(TFRecordDataset(path, features=Payload(decode=parse_tensor)))
    assert len(got) == len(tensor_values())
    for value, raw in zip(got, tf_read(path)):
        want = tf.io.parse_tensor(raw, tf.string if value.__class__ is not torch.Tensor else
                                  tf.as_dtype(str(value.dtype).removeprefix("torch.")))
        if isinstance(value, torch.Tensor):
            assert np.array_equal(value.numpy(), want.numpy()) and value.shape == tuple(want.shape)
        else:
            assert value == want.numpy().tolist()


def test_empty_examples_and_other_keys_are_not_taken_for_tensors(tmp_path):
    """Examples TensorFlow writes with no features (no Features message, or an empty
    one), or with keys the spec does not name, stay Examples: empty dicts without a
    spec, a missing key (or the default) with one."""
    path = tmp_path / "e.tfrecord"
    examples = [tf.train.Example(), tf.train.Example(features=tf.train.Features()),
                tf.train.Example(features=tf.train.Features(feature={
                    "other": tf.train.Feature(int64_list=tf.train.Int64List(value=[3]))}))]
    tf_write(path, [e.SerializeToString() for e in examples])
    assert [dict(r) for r in TFRecordDataset(path)][:2] == [{}, {}]
    assert [dict(r) for r in TFRecordDataset(path, batch_size=2)][0] == {}
    assert [dict(IndexedTFRecordDataset(path)[i]) for i in range(2)] == [{}, {}]
    assert [int(r["x"]) for r in TFRecordDataset(path, features={"x": Int64(default=torch.tensor(-1))})] == [-1] * 3
    for i in range(3):
        with pytest.raises(FeatureError, match=r"feature 'x': required feature is missing") as info:
            IndexedTFRecordDataset(path, features={"x": Int64()})[i]
        assert "serialized tensor" not in str(info.value)
