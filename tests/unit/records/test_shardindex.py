"""The local index cache: indexes built for shards the library only reads are kept there,
keyed so a changed file is never served a stale index, shared by threads and forked
processes, bounded, and easy to clear."""

import io
import multiprocessing
import os

import numpy as np
import pytest
from helpers import in_threads, write_shards

from tfrecord_torch import RecordWriter, TFRecordDataset, make_example
from tfrecord_torch.cli import main
from tfrecord_torch.records import shardindex
from tfrecord_torch.records.index import scan_index


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(folder))
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(tmp_path / "shards"))  # `cache --clear` clears it too
    return folder


def _entries(folder):
    return sorted(os.listdir(folder)) if folder.exists() else []


def _forbid_scans(monkeypatch):
    def no_scan(*args, **kwargs):
        raise AssertionError("scanned a shard whose index is cached")

    monkeypatch.setattr(shardindex, "scan_index", no_scan)


def test_a_shard_changed_in_place_is_never_served_its_old_index(tmp_path, cache):
    """Same size, same mtime put back, two neighbours of different sizes swapped."""
    path = tmp_path / "a.tfrecord"

    def write(order):
        sizes = {i: 3 for i in range(10)} | {4: 9, 5: 2}
        buf = io.BytesIO()
        with RecordWriter(buf) as w:
            for i in order:
                w.write(make_example({"id": i, "pad": np.zeros(sizes[i], np.int64)}))
        return buf.getvalue()

    path.write_bytes(write(range(10)))
    assert [int(r["id"][0]) for r in TFRecordDataset(path)] == list(range(10))
    st = os.stat(path)
    swapped = [0, 1, 2, 3, 5, 4, 6, 7, 8, 9]
    with open(path, "r+b") as f:
        f.write(write(swapped))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    assert [int(r["id"][0]) for r in TFRecordDataset(path)] == swapped
    assert sorted(int(r["id"][0]) for r in TFRecordDataset(path, shuffle=True)) == list(range(10))


def test_shared_by_8_threads(tmp_path, cache, monkeypatch):
    paths = write_shards(tmp_path, [5, 6, 7])
    results = []
    errors = in_threads(lambda: results.append(len(TFRecordDataset(tmp_path))))
    assert errors == [] and results == [18] * 8
    assert len(_entries(cache)) == 3  # one entry per shard, no partial files
    _forbid_scans(monkeypatch)
    assert [len(i) for i in TFRecordDataset(paths).indexes] == [5, 6, 7]


def _open_in_child(folder, out):
    out.put(len(TFRecordDataset(folder)))


def test_shared_by_forked_processes(tmp_path, cache, monkeypatch):
    write_shards(tmp_path, [5, 6])
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_open_in_child, args=(str(tmp_path), out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    assert sorted(out.get(timeout=5) for _ in procs) == [11] * 4
    assert len(_entries(cache)) == 2
    _forbid_scans(monkeypatch)  # the children's indexes serve the parent
    assert len(TFRecordDataset(tmp_path)) == 11


def test_the_cache_is_bounded_least_recently_used_first(tmp_path, cache, monkeypatch):
    paths = write_shards(tmp_path, [50, 50, 50])
    size = len(b"".join(f"{o} {s}\n".encode() for o, s in scan_index(paths[0]).tolist()))
    monkeypatch.setenv("TFRECORD_TORCH_CACHE_LIMIT", str(2 * size + size // 2))  # room for two
    for p in paths:
        TFRecordDataset(p)
    kept = _entries(cache)
    assert len(kept) == 2 and not any(e.startswith(os.path.basename(paths[0])) for e in kept)
    assert sum(os.path.getsize(cache / e) for e in kept) <= 2 * size + size // 2


def test_the_cli_shows_and_clears_it(tmp_path, cache, capsys):
    write_shards(tmp_path, [3, 4])
    TFRecordDataset(tmp_path)
    assert main(["cache"]) == 0
    assert f"{cache}: 2 cached indexes" in capsys.readouterr().out
    assert main(["cache", "--clear"]) == 0
    assert "removed 2 cached indexes" in capsys.readouterr().out
    assert _entries(cache) == []


def test_a_bad_limit_is_named(tmp_path, cache, monkeypatch):
    write_shards(tmp_path, [3])
    monkeypatch.setenv("TFRECORD_TORCH_CACHE_LIMIT", "1GB")
    with pytest.raises(ValueError, match="TFRECORD_TORCH_CACHE_LIMIT must be a number of bytes"):
        TFRecordDataset(tmp_path)
