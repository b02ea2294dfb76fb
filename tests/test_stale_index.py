"""A stale index (the shard rewritten with its records reordered, same size)
is reported as a stale index by every indexed reader -- never as corruption
of a valid file, never skipped, never a wrong record."""

import pickle

import numpy as np
import pytest

from tfrecord_torch import (
    CorruptRecordError,
    IndexedReader,
    IndexedTFRecordDataset,
    Int64,
    RecordWriter,
    StaleIndexError,
    TFRecordDataset,
    build_index,
    make_example,
)

SPEC = {"id": Int64()}


def records(order, sizes):
    return [make_example({"id": i, "pad": np.zeros(sizes[i], np.int64)}) for i in order]


def write(path, payloads):
    with RecordWriter(path) as w:
        for p in payloads:
            w.write(p)


@pytest.fixture()
def stale(tmp_path):
    sizes = [3] * 40
    sizes[20], sizes[21] = 9, 2  # two neighbours of different sizes
    path = tmp_path / "a.tfrecord"
    write(path, records(range(40), sizes))
    index = tmp_path / "old.index"
    build_index(path, index)
    order = list(range(40))
    order[20], order[21] = 21, 20
    write(path, records(order, sizes))  # same records, same size, two swapped: the old index is stale
    return path, index


def test_every_indexed_reader_reports_a_stale_index(stale):
    path, index = stale
    reader = IndexedReader(path, index=index)
    assert reader[19] and reader[22]  # records the swap did not move still read
    for i in (20, 21):
        with pytest.raises(StaleIndexError, match=rf"record {i} .*rebuild it"):
            reader[i]
    for on_error in ("raise", "skip"):  # never skipped: every later record could be misplaced
        ds = IndexedTFRecordDataset(path, features=SPEC, index=[index], on_error=on_error)
        assert int(ds[5]["id"]) == 5
        with pytest.raises(StaleIndexError):
            ds[21]
        # the iterable dataset reads runs of neighbours in one window, scanned by their own
        # headers: the swapped pair comes out as the file holds it, each record once
        for shuffle in (False, True):
            try:
                items = list(TFRecordDataset(path, features=SPEC, index=[index], shuffle=shuffle,
                                             on_error=on_error))
            except StaleIndexError:
                continue
            assert sorted(int(r["id"]) for r in items) == list(range(40))


def test_a_truly_corrupt_file_is_still_corrupt(tmp_path):
    path = tmp_path / "a.tfrecord"
    write(path, records(range(10), [3] * 10))
    build_index(path)
    data = bytearray(path.read_bytes())
    offset = int(IndexedReader(path).index[4, 0])
    data[offset + 2] ^= 0xFF  # record 4's length field
    path.write_bytes(bytes(data))
    reader = IndexedReader(path, index=str(path) + ".index")
    with pytest.raises(CorruptRecordError, match="record 4 .*length CRC mismatch"):
        reader[4]


def test_the_error_pickles():
    error = StaleIndexError("a.tfrecord", 10, 2, "no record starts there")
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.record == 2
