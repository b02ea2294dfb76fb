"""Fetching indexed records (tfrecord_torch/data/reading.py) with a ReadContext:
a reporter skips a bad record and is told of it, no reporter raises, and a
shared reader pool is used as given."""

import numpy as np
import pytest

import tfrecord_torch as tt
from tfrecord_torch.data import reading
from tfrecord_torch.data.reading import ReadContext, fetch, fetch_scattered, gather_scattered
from tfrecord_torch.errors import CorruptRecordError
from tfrecord_torch.io.pool import Reader, ReaderPool
from tfrecord_torch.records import frames
from tfrecord_torch.records.index import scan_index


def _shard(tmp_path, n=6, bad=None):
    path = str(tmp_path / "a.tfrecord")
    with tt.RecordWriter(path) as w:
        for i in range(n):
            w.write(f"record {i}".encode())
    index = scan_index(path)
    if bad is not None:  # flip a payload byte: its CRC no longer matches
        with open(path, "r+b") as f:
            f.seek(int(index[bad, 0]) + 12)
            byte = f.read(1)
            f.seek(int(index[bad, 0]) + 12)
            f.write(bytes([byte[0] ^ 0xFF]))
    return path, index


@pytest.mark.parametrize("records", [[0, 1, 2, 3, 4, 5], [5, 2, 0, 3]])
def test_fetch_reads_what_was_written(tmp_path, records):
    path, index = _shard(tmp_path)
    readers = ReaderPool()
    try:
        found = list(fetch(path, index, np.array(records), ReadContext(readers=readers)))
    finally:
        readers.close()
    assert [bytes(i.payload) for i in found] == [f"record {r}".encode() for r in records]
    assert [i.record for i in found] == records
    assert [i.offset for i in found] == [int(index[r, 0]) for r in records]


@pytest.mark.parametrize("records", [[0, 1, 2, 3, 4, 5], [5, 2, 0, 3]])
def test_a_reporter_skips_a_bad_record_and_no_reporter_raises(tmp_path, records):
    path, index = _shard(tmp_path, bad=2)
    reported = []
    found = list(fetch(path, index, np.array(records), ReadContext(report=reported.append)))
    assert [i.record for i in found] == [r for r in records if r != 2]
    assert len(reported) == 1 and isinstance(reported[0], CorruptRecordError)
    assert reported[0].record == 2 and reported[0].path == path
    with pytest.raises(CorruptRecordError):
        list(fetch(path, index, np.array(records), ReadContext()))


def test_scattered_records_come_in_the_order_asked(tmp_path):
    path, index = _shard(tmp_path)
    shards, records = np.zeros(4, np.int64), np.array([3, 0, 5, 1])
    found = fetch_scattered([path], [index], shards, records, ReadContext(verify=False))
    assert [i.record for i in found] == [3, 0, 5, 1]


@pytest.mark.skipif(not frames.compiled_frames(), reason="the compiled reader is not built")
def test_scattered_local_records_are_read_by_one_compiled_call(tmp_path, monkeypatch):
    """A shuffled batch's records of a local shard: one compiled read of
    them all (no Python read and frame check per record), the same items."""
    path, index = _shard(tmp_path, n=40)
    calls = []
    monkeypatch.setattr(Reader, "read", lambda self, *a, **k: calls.append(a) or b"")
    order = np.random.default_rng(0).permutation(40)[:12]  # far apart, some adjacent
    shards = np.zeros(12, np.int64)
    found = fetch_scattered([path], [index], shards, order, ReadContext())
    assert [bytes(i.payload) for i in found] == [f"record {r}".encode() for r in order.tolist()]
    assert [i.offset for i in found] == [int(index[r, 0]) for r in order.tolist()]
    payloads = gather_scattered([path], [index], shards, order, ReadContext()).payloads()
    assert payloads == [f"record {r}".encode() for r in order.tolist()]
    assert calls == []


@pytest.mark.skipif(not frames.compiled_frames(), reason="the compiled reader is not built")
def test_scattered_records_over_the_compiled_calls_limit_are_read_in_several(tmp_path, monkeypatch):
    """A batch of more frame bytes than one compiled call reads goes in
    several calls (not record by record in Python); a bad record in one of
    them leaves the batch to the usual path, which reports it."""
    path, index = _shard(tmp_path, n=40, bad=33)
    monkeypatch.setattr(reading, "READ_LIMIT", 5 * int(index[0, 1]) + 3)  # five frames a call
    calls = []
    real = reading.read_records
    monkeypatch.setattr(reading, "read_records", lambda *a: calls.append(len(a[2])) or real(*a))
    monkeypatch.setattr(Reader, "read", lambda self, *a, **k: pytest.fail("read record by record"))
    order = np.array([30, 1, 2, 3, 12, 17, 5, 6, 7, 8, 9, 25, 26], np.int64)
    found = fetch_scattered([path], [index], np.zeros(len(order), np.int64), order, ReadContext())
    assert [bytes(i.payload) for i in found] == [f"record {r}".encode() for r in order.tolist()]
    assert calls == [5, 5, 3]
    monkeypatch.undo()
    monkeypatch.setattr(reading, "READ_LIMIT", 5 * int(index[0, 1]) + 3)
    reported = []
    order = np.array([30, 33, 2, 3, 12, 17, 5], np.int64)
    found = fetch_scattered([path], [index], np.zeros(len(order), np.int64), order, ReadContext(report=reported.append))
    assert [None if i is None else i.record for i in found] == [30, None, 2, 3, 12, 17, 5]
    assert [e.record for e in reported] == [33]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_scattered_records_of_several_shards_with_a_bad_one_and_repeats(tmp_path, monkeypatch, compiled):
    """Records of two shards asked in any order, some twice, one of them bad
    under a reporter: each position gets its record (None for the bad one,
    reported once), and the payloads come in the order asked without it,
    by the compiled reader or without it."""
    if not compiled:
        monkeypatch.setattr(reading, "compiled_frames", lambda: False)
        monkeypatch.setattr(reading, "read_records", lambda *a: None)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path_a, index_a = _shard(tmp_path / "a", n=30, bad=7)
    path_b, index_b = _shard(tmp_path / "b", n=30)
    shards = np.array([1, 0, 0, 1, 0, 0, 1, 0], np.int64)
    records = np.array([4, 7, 8, 5, 20, 8, 29, 0], np.int64)
    reported = []
    found = gather_scattered([path_a, path_b], [index_a, index_b], shards, records,
                             ReadContext(report=reported.append))
    items = found.items()
    assert [None if i is None else (i.path, i.record, bytes(i.payload)) for i in items] == [
        None if (s, r) == (0, 7) else ([path_a, path_b][s], r, f"record {r}".encode())
        for s, r in zip(shards.tolist(), records.tolist())]
    assert [i.offset for i in items if i is not None] == [
        int([index_a, index_b][s][r, 0]) for s, r in zip(shards.tolist(), records.tolist()) if (s, r) != (0, 7)]
    assert [bytes(p) for p in found.payloads()] == [bytes(i.payload) for i in items if i is not None]
    assert [e.record for e in reported] == [7]


@pytest.mark.parametrize("records", [[5, 2, 0, 3], [1, 2, 3, 4]], ids=["scattered", "run"])
def test_reads_that_come_back_short_are_read_on(tmp_path, monkeypatch, records):
    """A positioned read may return fewer bytes than asked short of the end of
    the file (FUSE, NFS): the compiled reader then leaves the records to the
    usual path, which reads on and gets each record whole, not a healthy
    file reported as cut short; at the end of the file a read gives what is there."""
    import os

    from tfrecord_torch.io import pool

    path, index = _shard(tmp_path, n=6)
    real = os.pread
    monkeypatch.setattr(pool.os, "pread", lambda fd, n, at: real(fd, min(n, 7), at))  # 7 bytes a call
    monkeypatch.setattr(reading, "read_records", lambda *a: None)  # what a short preadv gets
    monkeypatch.setattr(reading, "read_frames", lambda *a: None)
    found = fetch_scattered([path], [index], np.zeros(len(records), np.int64), np.array(records), ReadContext())
    assert [bytes(i.payload) for i in found] == [f"record {r}".encode() for r in records]
    reader = Reader(path)
    try:
        end = int(index[-1].sum())
        with open(path, "rb") as f:
            assert reader.read(end - 30, 100) == f.read()[end - 30:]
        assert reader.read(end, 10) == b""
    finally:
        reader.close()


def test_a_read_context_is_frozen_and_keyword_only():
    context = ReadContext(verify=False)
    with pytest.raises(AttributeError):
        context.verify = True
    with pytest.raises(TypeError):
        ReadContext(None, False)


WORKER_IMPORTS = """
import sys
import torch.utils.data
from tfrecord_torch import TFRecordDataset, presets

before = set()
new = lambda item: {**item, "new": sorted(set(sys.modules) - before)}
ds = TFRecordDataset(sys.argv[1], features=presets.tfds(), transform=new)
loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=list,
                                     worker_init_fn=lambda _: before.update(sys.modules))
print(sorted({name for batch in loader for item in batch for name in item["new"]}))
"""


@pytest.mark.slow  # a script of its own importing torch, with its DataLoader workers: about 9 s of CPU
def test_a_worker_imports_nothing_to_read_and_decode_images(tmp_path):
    """Modules first imported in a forked DataLoader worker are imported
    again by every epoch's workers (numpy.ma under np.unique, tv_tensors
    under the decoded images): they are imported in the main process."""
    import subprocess
    import sys

    from helpers import image_shards

    path, _ = image_shards(tmp_path, fmt="JPEG", sizes=((16, 16),) * 8)
    out = subprocess.run([sys.executable, "-c", WORKER_IMPORTS, str(path)], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _memory_shards(tmp_path, name, bad=None, n=3):
    """``n`` shards of 6 records in memory://, their indexes; ``bad``: (shard,
    record, "payload" or "length"), that frame's payload byte or length byte
    flipped."""
    import fsspec

    paths, indexes = [], []
    for s in range(n):
        folder = tmp_path / f"{name}{s}"
        folder.mkdir()
        path, index = _shard(folder)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        if bad is not None and bad[0] == s:
            at = int(index[bad[1], 0]) + (12 if bad[2] == "payload" else 0)
            data[at] ^= 0xFF
        url = f"memory://joined-{name}/{s}.tfrecord"
        fsspec.filesystem("memory").pipe_file(url, bytes(data))
        paths.append(url)
        indexes.append(index)
    return paths, indexes


@pytest.mark.parametrize("bad", [None, (1, 2, "payload"), (1, 2, "length")], ids=["sound", "payload", "length"])
def test_the_runs_of_several_remote_shards_are_cut_together_and_bad_records_named(tmp_path, monkeypatch, bad):
    # An in-order read of small remote shards fetches their runs together; a bad
    # record among them is skipped and reported (or raised) as in a run of one
    # shard, and a bad length resumes at the next record through the index.
    from tfrecord_torch.data import reading

    together = []
    real = reading.fetch_runs_together
    monkeypatch.setattr(reading, "fetch_runs_together", lambda *a: together.append(a[0]) or real(*a))
    name = "sound" if bad is None else bad[2]
    paths, indexes = _memory_shards(tmp_path, name, bad)
    shards = np.repeat(np.arange(3), 6)
    records = np.tile(np.arange(6), 3)
    reported = []
    found = fetch_scattered(paths, indexes, shards, records, ReadContext(report=reported.append))
    assert together == [paths]
    expected = [(s, r) for s, r in zip(shards.tolist(), records.tolist()) if bad is None or (s, r) != bad[:2]]
    assert [(paths.index(i.path), i.record) for i in found if i is not None] == expected
    assert [bytes(i.payload) for i in found if i is not None] == [f"record {r}".encode() for _, r in expected]
    if bad is None:
        assert reported == []
        return
    assert len(reported) == 1 and reported[0].path == paths[1] and reported[0].record == 2
    with pytest.raises(CorruptRecordError) as raised:
        fetch_scattered(paths, indexes, shards, records, ReadContext())
    assert raised.value.path == paths[1] and raised.value.record == 2
