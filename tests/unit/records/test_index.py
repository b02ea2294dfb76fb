"""Index files: built, loaded and checked against their shard (other files, changed
files, malformed text, compressed shards), and offsets equal to a streaming read."""

import numpy as np
import pytest

from tfrecord_torch import (
    IndexedReader,
    IndexMismatchError,
    TFRecordError,
    build_index,
    check_index,
    load_index,
    read_records,
)
from tfrecord_torch.records.index import scan_index

from .conftest import write


def test_build_and_load(shard):
    path, payloads = shard
    index_path = build_index(path)
    assert index_path == str(path) + ".index"
    index = load_index(index_path)
    assert index.dtype == np.int64 and index.shape == (200, 2)
    assert index[:, 1].tolist() == [len(p) + 16 for p in payloads]
    assert index[0, 0] == 0 and index[1:, 0].tolist() == np.cumsum(index[:-1, 1]).tolist()
    with open(index_path) as f:
        lines = f.read().splitlines()
    assert lines[1] == f"{index[1, 0]} {index[1, 1]}"
    check_index(index, path)


def test_empty_file_index(tmp_path):
    path = write(tmp_path / "e.tfrecord", [])
    index = load_index(build_index(path))
    assert index.shape == (0, 2)
    assert len(IndexedReader(path)) == 0


@pytest.mark.parametrize("mutate, match", [
    (lambda ix: ix[:-1], "the records end at byte"),
    (lambda ix: np.vstack([ix, [[ix[-1, 0] + ix[-1, 1], 20]]]), "the records end at byte"),
    (lambda ix: ix + np.array([[1, 0]]), "first record is at byte 1"),
    (lambda ix: np.vstack([ix[:1], ix[2:]]), "record 1 is at byte"),
])
def test_mismatched_index(shard, mutate, match):
    path, _ = shard
    index = mutate(load_index(build_index(path)))
    with pytest.raises(IndexMismatchError, match=match) as info:
        check_index(index, path, index_path="x.index")
    assert "x.index" in str(info.value) and str(path) in str(info.value)


def test_index_of_another_file_with_same_size(tmp_path):
    a = write(tmp_path / "a.tfrecord", [b"x" * 10, b"y" * 30])
    b = write(tmp_path / "b.tfrecord", [b"x" * 30, b"y" * 10])
    assert a.stat().st_size == b.stat().st_size
    with pytest.raises(IndexMismatchError, match="does not start with a valid header"):
        IndexedReader(b, index=build_index(a))


def test_changed_file_refuses_stale_index(shard):
    path, payloads = shard
    index_path = build_index(path)
    write(path, payloads[:-1])
    with pytest.raises(IndexMismatchError, match="changed"):
        IndexedReader(path, index=index_path)


@pytest.mark.parametrize("text, match", [
    ("0 16\n16\n", "line 2"),
    ("0 16\nx y\n", "integers"),
    ("0 -16\n", "negative"),
    ("0 99999999999999999999999\n", "integers"),
])
def test_malformed_index_files(tmp_path, text, match):
    index_path = tmp_path / "bad.index"
    index_path.write_text(text)
    with pytest.raises(IndexMismatchError, match=match):
        load_index(index_path)


def test_compressed_file_cannot_be_indexed(tmp_path):
    path = write(tmp_path / "a.tfrecord.gz", [b"a"], "gzip")
    with pytest.raises(TFRecordError, match="decompress"):
        build_index(path)
    with pytest.raises(TFRecordError, match="decompress"):
        IndexedReader(path)


def test_index_matches_streaming_offsets(tmp_path):
    rng = np.random.default_rng(3)
    payloads = [rng.bytes(int(n)) for n in rng.integers(0, 600_000, 20)] + [b"k" * 64] * 500
    path = write(tmp_path / "m.tfrecord", payloads)
    index = scan_index(path)
    assert index[:, 1].tolist() == [len(p) + 16 for p in payloads]
    reader = IndexedReader(path, index=index)
    assert [reader[i] for i in range(len(payloads))] == list(read_records(path))
