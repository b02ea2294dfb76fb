"""A stale index (the shard rewritten with its records reordered, same size)
is reported as a stale index by every indexed reader -- never as corruption
of a valid file, never skipped, never a wrong record."""

import io
import os
import pickle

import numpy as np
import pytest
import torch

from tfrecord_torch import (
    CorruptRecordError,
    IndexedReader,
    IndexedTFRecordDataset,
    IndexMismatchError,
    Int64,
    RecordWriter,
    Source,
    StaleIndexError,
    TFRecordDataset,
    build_index,
    make_example,
    parse_example,
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
                items = list(TFRecordDataset(path, features=SPEC, shuffle=shuffle,
                                             on_error=on_error, source=Source(index=[index])))
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


def test_an_index_of_another_file_of_the_same_size(tmp_path):
    """Ten records where the index knows five twice their size: refused as an
    index that does not describe the file (its sampled headers, or the
    windows that scan clean but hold other records), never as 'corrupt'."""
    small = make_example({"b": b"x" * 30})
    big = next(p for n in range(30, 120) if len(p := make_example({"b": b"y" * n})) == 2 * len(small) + 16)
    path, other = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"
    write(path, [small] * 10)
    write(other, [big] * 5)
    assert path.stat().st_size == other.stat().st_size
    index = build_index(other, tmp_path / "b.index")
    for shuffle in (False, True):
        with pytest.raises((StaleIndexError, IndexMismatchError)):
            list(TFRecordDataset(path, shuffle=shuffle, on_error="skip", source=Source(index=[index])))


def test_windows_that_scan_clean_but_hold_other_records(tmp_path):
    """Two records of the file are one in the index (same bytes in all), away
    from the headers the index check samples: the read window scans clean
    but holds one record more than the index says."""
    small = make_example({"b": b"x" * 30})
    big = next(p for n in range(30, 120) if len(p := make_example({"b": b"y" * n})) == 2 * len(small) + 16)
    path, other = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"
    write(path, [small] * 200)
    write(other, [small] * 50 + [big] + [small] * 148)
    assert path.stat().st_size == other.stat().st_size
    index = build_index(other, tmp_path / "b.index")
    with pytest.raises(StaleIndexError, match=r"hold 200 records"):
        list(TFRecordDataset(path, source=Source(index=[index])))


def _rewrite_in_place(path, payloads, *, keep_mtime):
    """Rewrite a file's bytes in place (same inode), optionally putting its old mtime back."""
    st = os.stat(path)
    buf = io.BytesIO()
    with RecordWriter(buf) as w:
        for p in payloads:
            w.write(p)
    data = buf.getvalue()
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


ACCESS_MODES = {
    "in order": lambda p: [int(r["id"]) for r in TFRecordDataset(p, features=SPEC)],
    "shuffled": lambda p: [int(r["id"]) for r in TFRecordDataset(p, features=SPEC, shuffle=True)],
    "2 workers": lambda p: [int(r["id"]) for r in torch.utils.data.DataLoader(
        TFRecordDataset(p, features=SPEC), batch_size=None, num_workers=2)],
    "map-style": lambda p: _every_item(IndexedTFRecordDataset(p, features=SPEC)),
    "map-style, skip": lambda p: _every_item(IndexedTFRecordDataset(p, features=SPEC, on_error="skip")),
    "IndexedReader": lambda p: [int(parse_example(r)["id"][0]) for r in _every_item(IndexedReader(p), raw=True)],
}


def _every_item(ds, raw=False):
    return [ds[i] if raw else int(ds[i]["id"]) for i in range(len(ds))]


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["new mtime", "old mtime put back"])
@pytest.mark.parametrize("indexed_by", ["tfrecord-torch index", "another tool"])
@pytest.mark.parametrize("mode", list(ACCESS_MODES))
def test_every_access_mode_reads_a_shard_rewritten_in_place_right(tmp_path, mode, indexed_by, keep_mtime):
    """A same-size shard rewritten in place (two neighbours swapped) with its old index
    beside it: every access mode notices and reads the file as it is now, never raising
    on the valid file, never giving a record from the old layout."""
    sizes = [3] * 40
    sizes[20], sizes[21] = 9, 2
    path = tmp_path / "a.tfrecord"
    write(path, records(range(40), sizes))
    build_index(path)  # <path>.index and its stamp, as `tfrecord-torch index` writes them
    if indexed_by == "another tool":
        os.unlink(str(path) + ".index.json")  # DALI's tfrecord2idx writes no stamp
    order = list(range(40))
    order[20], order[21] = 21, 20
    _rewrite_in_place(path, records(order, sizes), keep_mtime=keep_mtime)
    got = ACCESS_MODES[mode](path)
    if mode in ("shuffled", "2 workers"):
        got = sorted(got, key=order.index)
    assert got == order
