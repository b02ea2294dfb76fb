"""Records that are not Examples, written by TensorFlow's ``tf.io.TFRecordWriter`` (the framing
Apache Beam's ``WriteToTFRecord`` writes around whatever its coder gives): JSON documents, random
bytes (empty records, a 2 MB one, records across the reader's blocks) and a protobuf of another
type. Read with ``features=Payload()``, every dataset and mode gives, record for record, what
``tf.data.TFRecordDataset`` reads; ``Payload(decode=...)`` gives the hook applied to those bytes.
"""

import json

import pytest
import tensorflow as tf
from google.protobuf.timestamp_pb2 import Timestamp
from torch.utils.data import DataLoader

from tfrecord_torch import IndexedTFRecordDataset, Payload, Shuffling, Source, TFRecordDataset

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
