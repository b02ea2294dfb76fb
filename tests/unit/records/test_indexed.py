"""IndexedReader: random access to the records of an indexed shard, with or without an
index file, after pickling, and corruption named at the record read."""

import numpy as np
import pytest

from tfrecord_torch import IndexedReader, build_index, load_index

from .conftest import write


def test_random_access(shard):
    path, payloads = shard
    build_index(path)
    reader = IndexedReader(path)
    assert len(reader) == 200
    order = np.random.default_rng(1).permutation(200)
    assert [reader[int(i)] for i in order] == [payloads[i] for i in order]
    assert reader[-1] == payloads[-1]
    with pytest.raises(IndexError):
        reader[200]


def test_reader_without_index_file_scans(tmp_path):
    path = write(tmp_path / "a.tfrecord", [b"a", b"bb"])
    reader = IndexedReader(path)
    assert [reader[0], reader[1]] == [b"a", b"bb"]
    assert not (tmp_path / "a.tfrecord.index").exists()


def test_reader_survives_pickling(shard):
    import pickle

    path, payloads = shard
    reader = IndexedReader(path)
    assert reader[3] == payloads[3]
    clone = pickle.loads(pickle.dumps(reader))
    assert clone[4] == payloads[4]


def test_corrupt_record_through_index(shard):
    path, _ = shard
    build_index(path)
    raw = bytearray(path.read_bytes())
    index = load_index(str(path) + ".index")
    offset = int(index[50, 0])
    raw[offset + 14] ^= 1
    path.write_bytes(bytes(raw))
    reader = IndexedReader(path)
    from tfrecord_torch import CorruptRecordError

    with pytest.raises(CorruptRecordError) as info:
        reader[50]
    assert (info.value.offset, info.value.record) == (offset, 50)
