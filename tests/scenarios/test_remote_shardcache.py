"""The shard cache through the datasets, against moto's S3 server on 127.0.0.1
(every request logged): each remote shard is copied once and later epochs make no
range requests for records, DataLoader workers share the copies, and a killed
copier, a cut copy, a full disk and a rewritten object give the right records or a
clear error -- the records always equal an uncached read's."""

import errno
import gc
import logging
import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest
from torch.utils.data import DataLoader

from tfrecord_torch import (
    IndexedTFRecordDataset,
    Int64,
    ReadBudget,
    RecordWriter,
    ShardCache,
    ShardedWriter,
    Source,
    TFRecordDataset,
    make_example,
)
from tfrecord_torch.errors import RemoteError
from tfrecord_torch.io import files, shardcache
from tfrecord_torch.io.budget import FillBudget

from .test_remote import S3, Overlap, is_listing, with_bucket

RECORDS = 60
SHARDS = 3


@pytest.fixture(scope="module")
def s3():
    yield from with_bucket(S3())


def write(s3, prefix: str, first_id: int = 0) -> list[str]:
    """Three shards of 20 records, ids ``first_id`` on, with index objects."""
    with ShardedWriter(f"s3://bucket/{prefix}", name="data", max_records=RECORDS // SHARDS,
                       storage_options=s3.options) as w:
        for i in range(first_id, first_id + RECORDS):
            w.write(make_example({"id": i, "pad": np.full(32, i, np.int64)}))
    return w.paths


_prefixes = iter(range(10_000))


@pytest.fixture(scope="module")
def shards(s3):
    """Shards with index objects (no index cache involved); the tests change only their copies."""
    return write(s3, f"sc{next(_prefixes)}")


def shard_gets(s3, paths) -> dict[str, int]:
    """GET requests (ranged or not) of each shard object since the log was cleared."""
    keys = {"/" + p.split("://", 1)[1]: p for p in paths}
    counts = dict.fromkeys(paths, 0)
    for method, path, _ in s3.requests:
        if method == "GET" and path in keys:
            counts[keys[path]] += 1
    return counts


def wait_for_copies(cache, count: int) -> None:
    """Wait until the cache holds ``count`` copies (they are filled in the background)."""
    deadline = time.monotonic() + 30
    while shardcache.shard_cache_usage(cache)[0] < count and time.monotonic() < deadline:
        time.sleep(0.01)


def ids(dataset) -> list[int]:
    out = []
    for item in dataset:
        out += item["id"].reshape(-1).tolist()
    return out


def dataset(s3, paths, cache, budget=None, **kwargs):
    return TFRecordDataset(paths, features={"id": Int64()}, storage_options=s3.options,
                           source=Source(cache=cache, read_budget=budget), **kwargs)


def no_leftovers(folder) -> bool:
    return not [n for n in os.listdir(folder) if n.endswith((".partial", ".lock"))]


@pytest.mark.parametrize("options", [{}, {"shuffle": True}, {"batch_size": 7}, {"shuffle": True, "batch_size": 7}],
                         ids=["in-order", "shuffled", "batches", "shuffled-batches"])
def test_each_shard_is_copied_once_and_the_next_epoch_reads_no_ranges(s3, shards, tmp_path, options):
    plain = TFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options, **options)
    ds = dataset(s3, shards, ShardCache(str(tmp_path / "shards")), **options)
    s3.requests.clear()
    first = ids(ds)
    assert first == ids(plain) if not options.get("shuffle") else sorted(first) == list(range(RECORDS))
    s3.requests.clear()
    first = ids(ds)
    assert sorted(first) == list(range(RECORDS))
    assert shard_gets(s3, shards) == dict.fromkeys(shards, 0)  # the copies, reused
    assert no_leftovers(tmp_path / "shards")


def test_streamed_gzip_shards_are_copied_once_and_streamed_from_the_copies(s3, fills, tmp_path):
    paths = [f"s3://bucket/gz{next(_prefixes)}/part-{k}.tfrecord.gz" for k in range(2)]
    for k, url in enumerate(paths):
        with RecordWriter(url, compression="gzip", storage_options=s3.options) as w:
            for i in range(k * 10, k * 10 + 10):
                w.write(make_example({"id": i}))
    ds = dataset(s3, paths, ShardCache(str(tmp_path / "shards")), shuffle=True)
    assert ds.streamed
    s3.requests.clear()
    assert sorted(ids(ds)) == list(range(20))
    assert fills == dict.fromkeys(paths, 1)
    s3.requests.clear()
    assert sorted(ids(ds)) == list(range(20))
    assert shard_gets(s3, paths) == dict.fromkeys(paths, 0)


def test_random_reads_copy_each_shard_with_one_whole_range(s3, fills, shards, tmp_path):
    ds = IndexedTFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options,
                                cache=ShardCache(str(tmp_path / "shards")))
    order = np.random.default_rng(1).permutation(RECORDS).tolist()
    s3.requests.clear()
    assert [ds[i]["id"].item() for i in order] == order
    wait_for_copies(ShardCache(str(tmp_path / "shards")), SHARDS)
    ds.close()
    assert fills == dict.fromkeys(shards, 1)
    s3.requests.clear()
    assert [ds[i]["id"].item() for i in order] == order
    assert shard_gets(s3, shards) == dict.fromkeys(shards, 0)


def test_two_workers_share_one_copy_per_shard(s3, shards, tmp_path):
    ds = dataset(s3, shards, ShardCache(str(tmp_path / "shards")), shuffle=True)
    s3.requests.clear()
    got = ids(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(got) == list(range(RECORDS))
    assert shardcache.shard_cache_usage(ShardCache(str(tmp_path / "shards")))[0] == SHARDS
    s3.requests.clear()
    assert sorted(ids(DataLoader(ds, batch_size=None, num_workers=2))) == list(range(RECORDS))
    assert shard_gets(s3, shards) == dict.fromkeys(shards, 0)


def test_map_style_reads_records_from_the_copies(s3, shards, tmp_path):
    plain = IndexedTFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options)
    ds = IndexedTFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options,
                                cache=ShardCache(str(tmp_path / "shards")))
    order = np.random.default_rng(0).permutation(RECORDS).tolist()
    s3.requests.clear()
    assert [ds[i]["id"].item() for i in order] == [plain[i]["id"].item() for i in order]
    ds.close()
    s3.requests.clear()
    assert [x["id"].item() for x in ds.__getitems__(order)] == order
    assert shard_gets(s3, shards) == dict.fromkeys(shards, 0)


def test_no_copying_thread_is_left_after_a_break(s3, shards, tmp_path):
    ds = dataset(s3, shards, ShardCache(str(tmp_path / "shards"), ahead=2))
    for item in ds:
        assert item["id"].item() == 0
        assert any(t.name == "tfrecord_torch-copy-ahead" for t in threading.enumerate())
        break
    del item
    gc.collect()
    assert not [t for t in threading.enumerate() if t.name == "tfrecord_torch-copy-ahead"]


def test_copies_go_ahead_of_the_reader_in_the_epochs_order(s3, fills, shards, tmp_path):
    cache = ShardCache(str(tmp_path / "shards"), ahead=1)
    ds = dataset(s3, shards, cache)
    s3.requests.clear()
    it = iter(ds)
    assert next(it)["id"].item() == 0  # reading shard 0: a later shard is copied meanwhile
    deadline = time.monotonic() + 30
    while shardcache.shard_cache_usage(cache)[0] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    stats = {p: files.size_and_version(p, s3.options) for p in shards}
    held = {p for p in shards if os.path.exists(shardcache.entry_path(cache, p, *stats[p]))}
    # shard 0 and one ahead of it (which one depends on how far the record read-ahead has got)
    assert shards[0] in held and len(held) >= 2
    assert [x["id"].item() for x in it] == list(range(1, RECORDS))
    assert fills == dict.fromkeys(shards, 1)  # each copied once


def _read_until_killed(ds, started):
    """A DataLoader worker's reading, its copy held mid-download."""
    real = files.stream_range

    def slow(url, start, end, sink, storage_options=None, cancel=None, check=None):
        reached = real(url, start, end, sink, storage_options, cancel, check)
        started.set()
        time.sleep(3600)
        return reached

    shardcache.fs.stream_range = slow  # this child only
    next(iter(ds))


def test_a_worker_killed_mid_copy_leaves_no_half_file_in_use(s3, shards, tmp_path):
    budget = ReadBudget(fill=FillBudget(chunk=1000))  # several ranges per shard: the kill comes between them
    folder = tmp_path / "shards"
    ds = dataset(s3, shards, ShardCache(str(folder), ahead=0), budget)
    ctx = multiprocessing.get_context("fork")
    started = ctx.Event()
    child = ctx.Process(target=_read_until_killed, args=(ds, started))
    child.start()
    try:
        assert started.wait(60)
        deadline = time.monotonic() + 30
        while not [n for n in os.listdir(folder) if n.endswith(".partial")] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [n for n in os.listdir(folder) if n.endswith(".partial")]  # the half copy
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    assert ids(ds) == list(range(RECORDS))
    assert no_leftovers(folder)
    assert shardcache.shard_cache_usage(ShardCache(str(folder)))[0] == SHARDS


def test_a_copy_cut_by_another_process_between_epochs_is_fetched_again(s3, fills, shards, tmp_path):
    cache = ShardCache(str(tmp_path / "shards"))
    ds = dataset(s3, shards, cache)
    assert ids(ds) == list(range(RECORDS))
    size, version = files.size_and_version(shards[1], s3.options)
    entry = shardcache.entry_path(cache, shards[1], size, version)
    os.truncate(entry, size // 2)
    s3.requests.clear()
    assert ids(ds) == list(range(RECORDS))
    assert fills == {shards[1]: 2, shards[0]: 1, shards[2]: 1}
    assert shard_gets(s3, [shards[0], shards[2]]) == {shards[0]: 0, shards[2]: 0}
    assert os.path.getsize(entry) == size


def test_a_copy_cut_while_open_is_fetched_again(s3, shards, tmp_path):
    cache = ShardCache(str(tmp_path / "shards"))
    ds = IndexedTFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options, cache=cache)
    assert ds[0]["id"].item() == 0
    wait_for_copies(cache, 1)
    ds.close()
    assert ds[0]["id"].item() == 0  # shard 0's copy is open now
    size, version = files.size_and_version(shards[0], s3.options)
    os.truncate(shardcache.entry_path(cache, shards[0], size, version), 100)
    assert [ds[i]["id"].item() for i in range(RECORDS)] == list(range(RECORDS))


def test_a_copy_damaged_in_place_is_named_removed_and_fetched_again(s3, shards, tmp_path):
    cache = ShardCache(str(tmp_path / "shards"))
    ds = dataset(s3, shards, cache)
    assert ids(ds) == list(range(RECORDS))
    size, version = files.size_and_version(shards[1], s3.options)
    entry = shardcache.entry_path(cache, shards[1], size, version)
    with open(entry, "r+b") as f:  # another process writes over a record's payload
        f.seek(size // 2)
        f.write(b"\xff" * 16)
    with pytest.raises(RemoteError, match=rf"{shards[1]}: record \d+ at byte \d+ \(cached copy at {entry}\)"):
        ids(ds)
    assert not os.path.exists(entry)
    assert ids(ds) == list(range(RECORDS))


def test_a_deleted_copy_is_fetched_again(s3, fills, shards, tmp_path):
    cache = ShardCache(str(tmp_path / "shards"))
    ds = dataset(s3, shards, cache)
    assert ids(ds) == list(range(RECORDS))
    assert shardcache.clear_shard_cache(cache) == SHARDS
    s3.requests.clear()
    assert ids(ds) == list(range(RECORDS))
    assert fills == dict.fromkeys(shards, 2)


def test_a_full_disk_reads_records_from_the_bucket(s3, shards, tmp_path, monkeypatch, caplog):
    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shardcache.os, "pwrite", full)
    folder = tmp_path / "shards"
    for options in ({}, {"shuffle": True}):
        plain = TFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options, **options)
        with caplog.at_level(logging.WARNING, logger="tfrecord_torch.io.shardcache"):
            assert ids(dataset(s3, shards, ShardCache(str(folder)), **options)) == ids(plain)
    assert "cannot write (No space left on device); reading from the bucket" in caplog.text
    assert os.listdir(folder) == []


def test_an_object_rewritten_between_epochs_is_an_error_not_its_old_records(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    prefix = f"sc{next(_prefixes)}"
    paths = write(s3, prefix)
    ds = dataset(s3, paths, ShardCache(str(tmp_path / "shards")))
    assert ids(ds) == list(range(RECORDS))
    write(s3, prefix, first_id=1000)  # the same sizes, other values
    got = []
    with pytest.raises(RemoteError, match=r"data-train\.tfrecord-00000-of-00003.*changed since it was listed"):
        for item in ds:
            got.append(item["id"].item())
    assert got == []  # neither the old records nor the new ones under the old index


def test_a_bad_cache_argument_is_refused():
    with pytest.raises(ValueError, match="Source.cache must be a ShardCache"):
        Source(cache="/tmp/cache")
    with pytest.raises(TypeError, match="cache must be a ShardCache"):
        IndexedTFRecordDataset("x.tfrecord", cache=32 << 30)


def test_the_cli_shows_and_clears_the_shard_copies(s3, shards, tmp_path, monkeypatch, capsys):
    from tfrecord_torch.cli import main

    folder = tmp_path / "shards"
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(folder))
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    assert ids(dataset(s3, shards, ShardCache())) == list(range(RECORDS))
    assert main(["cache"]) == 0
    size = sum(files.size_and_version(p, s3.options)[0] for p in shards)
    assert f"{folder}: {SHARDS} shard copies, {size:,} bytes" in capsys.readouterr().out
    assert main(["cache", "--clear"]) == 0
    assert f"removed {SHARDS} shard copies from {folder}" in capsys.readouterr().out
    assert os.listdir(folder) == []


@pytest.fixture
def thread_starts(monkeypatch):
    """The names of the threads started while the test runs."""
    names: list[str] = []
    start = threading.Thread.start

    def noted(self):
        names.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", noted)
    return names


@pytest.mark.parametrize("source", [{}, {"index": False}], ids=["indexed", "streamed"])
def test_complete_copies_are_read_in_the_consumers_thread(s3, fills, shards, tmp_path, thread_starts, source):
    plain = TFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options, shuffle=True,
                            source=Source(cache=None, **source))
    ds = TFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options, shuffle=True,
                         source=Source(cache=ShardCache(str(tmp_path / "shards"), ahead=0), **source))
    s3.requests.clear()
    cold = ids(ds)
    # the bucket's requests are made ahead by the copies' fills, which the reads follow as they are written
    assert "tfrecord_torch-copy-ahead" in thread_starts and "tfrecord_torch-readahead" not in thread_starts
    assert fills == dict.fromkeys(shards, 1)
    assert cold == ids(plain)
    thread_starts.clear()
    s3.requests.clear()
    warm = ids(ds)  # the copies, complete: fetched where they are decoded
    assert "tfrecord_torch-readahead" not in thread_starts
    assert shard_gets(s3, shards) == dict.fromkeys(shards, 0)
    assert warm == ids(plain) and warm != cold


def test_in_order_reads_of_copies_being_filled_are_made_in_the_consumers_thread(s3, fills, shards, tmp_path,
                                                                             slow_fills, thread_starts):
    cache = ShardCache(str(tmp_path / "shards"))
    s3.requests.clear()
    assert ids(dataset(s3, shards, cache, slow_fills)) == list(range(RECORDS))
    assert "tfrecord_torch-readahead" not in thread_starts  # the fills' threads fetch; the reads wait for them
    assert fills == dict.fromkeys(shards, 1)
    sizes = {p: files.size_and_version(p, s3.options)[0] for p in shards}
    assert fetched_bytes(s3, shards, sizes) == sum(sizes.values())  # each byte once: by the fills


def fetched_bytes(s3, paths, sizes: dict[str, int]) -> int:
    """Body bytes of the GETs of the shard objects since the log was cleared
    (a GET with no range brings the whole object)."""
    sizes = {"/" + p.split("://", 1)[1]: sizes[p] for p in paths}
    total = 0
    for method, path, asked in s3.requests:
        if method != "GET" or path not in sizes:
            continue
        if not asked:
            total += sizes[path]
            continue
        first, last = asked.split("=", 1)[1].split("-")
        total += min(int(last), sizes[path] - 1) - int(first) + 1
    return total


@pytest.fixture
def slow_fills(monkeypatch):
    """The read budget under which the shard cache's copies fetch several
    ranges per shard; they fetch them slowly (the readers open their shards
    while the copies are being filled)."""
    real = files.stream_range

    def slow(*args, **kwargs):
        time.sleep(0.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(files, "stream_range", slow)
    return ReadBudget(fill=FillBudget(chunk=2000))


COLD = {"in-order": ({}, 2), "shuffled": ({"shuffle": True}, 2), "shuffled-batches": ({"shuffle": True, "batch_size": 7}, 0),
        "streamed": ({"source_index": False}, 0), "map-style": ({"map_style": True}, 0)}


# fast: shuffled and map-style; the other cases (about 1.3 s of CPU each) are slow
@pytest.mark.parametrize("case", [c if c in ("shuffled", "map-style")
                                  else pytest.param(c, marks=pytest.mark.slow) for c in COLD])
def test_a_cold_epoch_fetches_each_shard_once(s3, shards, tmp_path, slow_fills, case):
    options, workers = COLD[case]
    sizes = {p: files.size_and_version(p, s3.options)[0] for p in shards}
    cache = ShardCache(str(tmp_path / "shards"))
    if options.get("map_style"):
        plain = IndexedTFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options, cache=None)
        ds = IndexedTFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options,
                                    source=Source(cache=cache, read_budget=slow_fills))
        order = np.random.default_rng(2).permutation(RECORDS).tolist()
        s3.requests.clear()
        got = [x["id"].item() for x in ds.__getitems__(order)]
        ds.close()
        fetched = fetched_bytes(s3, shards, sizes)
        assert got == [plain[i]["id"].item() for i in order]
    else:
        source = {"index": False} if options.pop("source_index", True) is False else {}
        plain = TFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options,
                                source=Source(cache=None, **source), **options)
        ds = TFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options,
                             source=Source(cache=cache, read_budget=slow_fills, **source), **options)
        def loaded(d):
            return ids(DataLoader(d, batch_size=None, num_workers=workers) if workers else d)

        s3.requests.clear()
        got = loaded(ds)
        fetched = fetched_bytes(s3, shards, sizes)
        assert got == loaded(plain)  # the same records in the same order as the bucket's
    # every byte once: the readers read the copies as they were filled, not the bucket beside them
    assert fetched <= 1.3 * sum(sizes.values())
    assert shardcache.shard_cache_usage(cache)[0] == SHARDS
    assert no_leftovers(tmp_path / "shards")


def gate_fill_ranges(monkeypatch, held) -> tuple[threading.Event, list]:
    """Holds the shards' range reads for which ``held(start, end)`` until the
    returned event is set (or 5 s): a read that had to wait for one is
    listed in the returned list (the first records waited for it)."""
    opened = threading.Event()
    overdue: list = []
    stream_range = files.stream_range

    def gated(url, start, end, *args):
        if ".index" not in url and held(start, end) and not opened.wait(5):
            overdue.append((url, start, end))
            opened.set()
        return stream_range(url, start, end, *args)

    monkeypatch.setattr(files, "stream_range", gated)
    return opened, overdue


def test_the_first_records_of_a_cold_shard_wait_for_a_small_first_range(s3, shards, tmp_path, monkeypatch):
    budget = ReadBudget(first=500, fill=FillBudget(chunk=2_000))  # a first read of a few of these records
    opened, overdue = gate_fill_ranges(monkeypatch, lambda start, end: end > 500)
    plain = ids(dataset(s3, shards, None))
    items = iter(dataset(s3, shards, ShardCache(str(tmp_path / "shards")), budget))
    first = next(items)
    assert overdue == []  # the first record came from the fill's first range alone
    opened.set()
    assert [int(first["id"]), *ids(items)] == plain  # the planned order


@pytest.mark.parametrize("options", [{}, {"batch_size": 7}, {"map_style": True}], ids=["records", "batches", "map-style"])
def test_the_first_shuffled_records_wait_for_no_fills_later_ranges(s3, shards, tmp_path, monkeypatch, options):
    # a first read of a few records, from all over the shards; early ones: the reads of 300, 600 and 1200 bytes
    budget = ReadBudget(first=300, early=900, fill=FillBudget(chunk=300))
    opened, overdue = gate_fill_ranges(monkeypatch, lambda start, end: start > 0)
    if options.pop("map_style", False):  # a sampler's batch of records from all over the shards
        order = np.random.default_rng(2).permutation(RECORDS).tolist()
        ds = IndexedTFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options,
                                    source=Source(cache=ShardCache(str(tmp_path / "shards")), read_budget=budget))
        got = [x["id"].item() for x in ds.__getitems__(order[:4])]
        assert overdue == []  # records past the fills' first ranges came from the bucket
        opened.set()
        got += [x["id"].item() for x in ds.__getitems__(order[4:])]
        ds.close()
        assert got == order
        return
    plain = ids(dataset(s3, shards, None, shuffle=True, **options))
    items = iter(dataset(s3, shards, ShardCache(str(tmp_path / "shards")), budget, shuffle=True, **options))
    # record mode: the early reads' records (~25 of these ~76-byte records); batch mode: the first batch
    first = [next(items) for _ in range(1 if options else 12)]
    assert overdue == []  # records past the fills' first ranges came from the bucket
    opened.set()
    assert [i for item in first for i in item["id"].reshape(-1).tolist()] + ids(items) == plain  # the planned order


def test_the_early_reads_in_order_wait_for_the_fill_and_fetch_each_byte_once(s3, shards, tmp_path, slow_fills,
                                                                             monkeypatch):
    budget = ReadBudget(first=300, early=900, fill=slow_fills.fill)
    stream_range = files.stream_range

    def later(url, start, *args):  # a fill's first range lands well before its next ones
        if start > 0:
            time.sleep(0.5)
        return stream_range(url, start, *args)

    monkeypatch.setattr(files, "stream_range", later)
    sizes = {p: files.size_and_version(p, s3.options)[0] for p in shards}
    s3.requests.clear()
    got = ids(dataset(s3, shards, ShardCache(str(tmp_path / "shards")), budget))
    assert got == list(range(RECORDS))
    assert fetched_bytes(s3, shards, sizes) == sum(sizes.values())  # the fills' bytes, none twice


def test_an_s3_copy_is_written_piece_by_piece_as_its_ranges_arrive(s3, shards, tmp_path, monkeypatch):
    from tfrecord_torch.io import streamed

    budget = ReadBudget(fill=FillBudget(chunk=1000))  # no range below the chunk: the first one 1000 bytes too
    monkeypatch.setattr(streamed, "PIECE", 100)
    written = []
    put = shardcache._InOrder.put

    def noted(self, offset, data):
        written.append((offset, len(data)))
        put(self, offset, data)

    monkeypatch.setattr(shardcache._InOrder, "put", noted)
    size, version = files.size_and_version(shards[0], s3.options)
    fd = shardcache.open_shard(shards[0], ShardCache(str(tmp_path / "shards")), size=size, version=version,
                               storage_options=s3.options, budget=budget)
    with os.fdopen(fd, "rb") as f:
        assert f.read() == files.read_range(shards[0], 0, size, s3.options)
    assert max(n for _, n in written) <= 100  # pieces as they came, not whole ranges
    ends = [0] + [at + n for at, n in sorted(written)]
    assert [at for at, _ in sorted(written)] == ends[:-1] and ends[-1] == size  # each byte once


def test_a_shuffled_cold_epoch_copies_its_shards_at_once_rather_than_reading_the_bucket(s3, tmp_path, slow_fills):
    """A shuffled read takes records of all its shards from the first group
    on: a shard whose copy waited behind the others' would be read from the
    bucket too (a request per record), so six shards are copied at once and
    each byte is fetched once."""
    with ShardedWriter(f"s3://bucket/six{next(_prefixes)}", name="data", max_records=10,
                       storage_options=s3.options) as w:
        for i in range(RECORDS):
            w.write(make_example({"id": i, "pad": np.full(32, i, np.int64)}))
    paths = w.paths
    assert len(paths) == 6
    sizes = {p: files.size_and_version(p, s3.options)[0] for p in paths}
    plain = ids(dataset(s3, paths, None, shuffle=True))
    cache = ShardCache(str(tmp_path / "shards"), ahead=0)
    s3.requests.clear()
    assert ids(dataset(s3, paths, cache, slow_fills, shuffle=True)) == plain
    assert fetched_bytes(s3, paths, sizes) == sum(sizes.values())
    assert shardcache.shard_cache_usage(cache)[0] == len(paths)


SHORT_RANGES = ReadBudget(fill=FillBudget(chunk=300, longest=300))
"""Several ranges per shard (of 1,520 bytes), all of 300 bytes (none below the chunk: the first one too)."""


def test_a_cold_copy_asks_s3_nothing_but_its_ranges(s3, tmp_path):
    """Each range's answer names the object's ETag and size, checked against
    the listing before its bytes are written: no HEAD before or after."""
    paths = write(s3, f"sc{next(_prefixes)}")
    ds = dataset(s3, paths, ShardCache(str(tmp_path / "shards"), ahead=0), SHORT_RANGES)
    s3.requests.clear()
    assert ids(ds) == list(range(RECORDS))
    keys = {"/" + p.split("://", 1)[1] for p in paths}
    asked = [(method, asked_range) for method, path, asked_range in s3.requests if path in keys]
    assert asked and {method for method, _ in asked} == {"GET"}
    assert all(asked_range for _, asked_range in asked)  # ranges, each byte once
    assert len(asked) > 2 * len(paths)


def _answers_without_etag(monkeypatch) -> None:
    """S3 answers to range GETs that name no ETag (as some S3-compatible servers give them)."""
    from tfrecord_torch.io import streamed

    answer = streamed._answer
    monkeypatch.setattr(streamed, "_answer", lambda got: streamed.Answer(None, answer(got).size))


def test_range_answers_without_an_etag_are_no_change_and_the_copy_is_asked_after(s3, tmp_path, monkeypatch):
    """A server that leaves the ETag out of its GET answers: the copy is
    made, and its object is asked once after the download (a HEAD each)."""
    _answers_without_etag(monkeypatch)
    paths = write(s3, f"sc{next(_prefixes)}")
    cache = ShardCache(str(tmp_path / "shards"), ahead=0)
    s3.requests.clear()
    assert ids(dataset(s3, paths, cache, SHORT_RANGES)) == list(range(RECORDS))
    keys = {"/" + p.split("://", 1)[1] for p in paths}
    heads = [path for method, path, _ in s3.requests if path in keys and method == "HEAD"]
    assert sorted(heads) == sorted(keys)
    assert shardcache.shard_cache_usage(cache)[0] == len(paths)


@pytest.mark.parametrize("etag", [True, False], ids=["answers name the ETag", "answers without an ETag"])
def test_an_object_rewritten_while_it_is_copied_is_an_error_and_no_copy(s3, tmp_path, monkeypatch, etag):
    if not etag:
        _answers_without_etag(monkeypatch)
    monkeypatch.setattr(shardcache, "PARALLEL", 1)  # one range after the other
    prefix = f"sc{next(_prefixes)}"
    paths = write(s3, prefix)
    size, version = files.size_and_version(paths[0], s3.options)
    stream_range = files.stream_range
    rewritten = []

    def then_rewritten(url, start, *args, **kwargs):
        reached = stream_range(url, start, *args, **kwargs)
        if not rewritten:  # after the first range: the same size, other bytes
            rewritten.append(write(s3, prefix, first_id=1000))
        return reached

    monkeypatch.setattr(files, "stream_range", then_rewritten)
    folder = tmp_path / "shards"
    with pytest.raises(RemoteError, match=r"data-train\.tfrecord-00000-of-00003.*changed"):
        shardcache.open_shard(paths[0], ShardCache(str(folder)), size=size, version=version,
                              storage_options=s3.options, budget=SHORT_RANGES)
    assert rewritten and os.listdir(folder) == []  # no copy, no half file


def _shard_heads_and_listings(s3, paths) -> tuple[int, int]:
    keys = {"/" + p.split("://", 1)[1] for p in paths}
    heads = sum(1 for method, path, _ in s3.requests if method == "HEAD" and path in keys)
    listings = sum(1 for method, path, _ in s3.requests if method == "GET" and path.rstrip("/") == "/bucket")
    return heads, listings


@pytest.mark.parametrize("options", [{}, {"shuffle": True}], ids=["in-order", "shuffled"])
def test_a_warm_epoch_checks_its_objects_by_one_listing_not_a_stat_each(s3, shards, tmp_path, options):
    """The next epoch over complete copies asks the bucket whether its objects
    changed once, by listing their folder: a stat each, in series before the
    first batch, took seconds for a few hundred shards."""
    ds = dataset(s3, shards, ShardCache(str(tmp_path / "shards")), **options)
    assert sorted(ids(ds)) == list(range(RECORDS))
    for _ in range(2):
        s3.requests.clear()
        assert sorted(ids(ds)) == list(range(RECORDS))
        assert _shard_heads_and_listings(s3, shards) == (0, 1)
        assert shard_gets(s3, shards) == dict.fromkeys(shards, 0)


def test_a_folder_that_cannot_be_listed_checks_each_object_by_itself(s3, shards, tmp_path, monkeypatch):
    from tfrecord_torch.io import files

    ds = dataset(s3, shards, ShardCache(str(tmp_path / "shards")))
    assert ids(ds) == list(range(RECORDS))

    def refused(urls, storage_options=None):
        raise PermissionError("s3://bucket: ListObjectsV2 denied")

    monkeypatch.setattr(files, "listed_versions", refused)
    s3.requests.clear()
    assert ids(ds) == list(range(RECORDS))
    assert _shard_heads_and_listings(s3, shards) == (len(shards), 0)


def _rewrite_with_longer_records(s3, url: str) -> None:
    """Another writer puts other records (longer ones) under ``url``."""
    with RecordWriter(url, storage_options={**s3.options, "skip_instance_cache": True}) as w:
        for i in range(RECORDS // SHARDS):
            w.write(make_example({"id": 5000 + i, "pad": np.full(50, i, np.int64)}))


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize("options", [{}, {"shuffle": True}], ids=["in-order", "shuffled"])
def test_an_object_rewritten_after_listing_read_by_ranges_is_an_error_not_corruption(s3, tmp_path, monkeypatch,
                                                                                    on_error, options):
    """Without a shard cache the records are read by range requests at the
    offsets the listing's index gives. An object rewritten since then is said
    to be that (make the dataset again), in either on_error mode: not a corrupt
    record, not records skipped, and none of the new object's records."""
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    paths = write(s3, f"sc{next(_prefixes)}")
    ds = dataset(s3, paths, None, on_error=on_error, **options)
    _rewrite_with_longer_records(s3, paths[1])
    got = []
    with pytest.raises(RemoteError, match=r"data-train\.tfrecord-00001-of-00003.*changed since it was listed"):
        for item in ds:
            got.append(item["id"].item())
    assert not [i for i in got if i >= 5000]


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_map_style_read_of_an_object_rewritten_after_listing_is_an_error(s3, tmp_path, monkeypatch, on_error):
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    paths = write(s3, f"sc{next(_prefixes)}")
    ds = IndexedTFRecordDataset(paths, features={"id": Int64()}, storage_options=s3.options, cache=None,
                                on_error=on_error)
    _rewrite_with_longer_records(s3, paths[1])
    assert ds[5]["id"].item() == 5  # another shard's record
    with pytest.raises(RemoteError, match=r"data-train\.tfrecord-00001-of-00003.*changed since it was listed"):
        ds[RECORDS // SHARDS + 3]



def test_a_read_by_ranges_asks_for_its_first_records_while_its_objects_are_checked(s3, tmp_path, monkeypatch):
    """The check of the objects against their listing (a listing of their
    folder) and the first range requests leave together: one round trip
    before the first record, not two. The records wait for the check (the
    tests above: a rewritten object's records are never returned)."""
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    paths = write(s3, f"sc{next(_prefixes)}")
    ds = dataset(s3, paths, None)
    overlap = Overlap(s3, monkeypatch, is_listing, lambda method, path, query: method == "GET"
                      and "/data-train.tfrecord-" in path and not path.endswith(".index"))
    assert next(iter(ds))["id"].item() == 0
    assert overlap.overlapped


UNCACHED = {"in-order": {}, "shuffled": {"shuffle": True}, "batches": {"batch_size": 7},
            "shuffled-batches": {"shuffle": True, "batch_size": 7}, "streamed": {"source": Source(cache=None, index=False)}}


def uncached(s3, paths, **options):
    """A dataset of ``paths`` read without the shard cache (range requests, or streamed)."""
    options.setdefault("source", Source(cache=None))
    return TFRecordDataset(paths, features={"id": Int64()}, storage_options=s3.options, **options)


@pytest.mark.parametrize("on_error", ["raise", "skip", "warn"])
@pytest.mark.parametrize("case", list(UNCACHED))
def test_an_object_rewritten_between_epochs_without_a_cache_is_an_error_not_its_new_records(s3, tmp_path, monkeypatch,
                                                                                           case, on_error):
    """Without the shard cache, a dataset made once reads its objects through
    the indexes of its listing. Objects rewritten between two epochs with
    records of the same lengths fit those indexes: the next epoch is a
    RemoteError naming an object and saying to make the dataset again, in every
    on_error mode -- as with the shard cache -- not the new records read
    through the old index."""
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    prefix = f"sc{next(_prefixes)}"
    paths = write(s3, prefix)
    ds = uncached(s3, paths, on_error=on_error, **UNCACHED[case])
    assert sorted(ids(ds)) == list(range(RECORDS))
    write(s3, prefix, first_id=1000)  # the same sizes, other values
    got = []
    with pytest.raises(RemoteError, match=r"data-train\.tfrecord-0000\d-of-00003: the object changed since it was "
                                          r"listed.*make the dataset again"):
        for item in ds:
            got += item["id"].reshape(-1).tolist()
    assert got == []  # neither the old records nor the new ones under the old index
    assert sorted(ids(uncached(s3, paths, **UNCACHED[case]))) == list(range(1000, 1000 + RECORDS))  # made again


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("case", ["in-order", "shuffled", "streamed"])
def test_without_a_cache_each_epoch_checks_its_objects_by_one_listing_per_reader(s3, shards, case, workers):
    """The check costs one listing of the shards' folder per epoch and reader
    (the main process, or each DataLoader worker): no request per record or
    per shard."""
    ds = uncached(s3, shards, **UNCACHED[case])
    for epoch in range(2):
        ds.set_epoch(epoch)
        s3.requests.clear()
        got = ids(DataLoader(ds, batch_size=None, num_workers=workers) if workers else ds)
        assert sorted(got) == list(range(RECORDS))
        assert _shard_heads_and_listings(s3, shards) == (0, max(workers, 1))


def test_without_a_cache_a_folder_that_cannot_be_listed_checks_each_object_by_itself(s3, shards, monkeypatch):
    def refused(urls, storage_options=None):
        raise PermissionError("s3://bucket: ListObjectsV2 denied")

    monkeypatch.setattr(files, "listed_versions", refused)
    ds = uncached(s3, shards)
    s3.requests.clear()
    assert ids(ds) == list(range(RECORDS))
    assert _shard_heads_and_listings(s3, shards) == (len(shards), 0)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_map_style_dataset_without_a_cache_checks_its_objects_in_each_workers_epoch(s3, tmp_path, monkeypatch,
                                                                                     on_error):
    """IndexedTFRecordDataset asks once per process: a DataLoader worker (new
    each epoch, unless persistent) asks when it first reads an object. Objects
    rewritten with records of the same lengths are a RemoteError the next epoch."""
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    prefix = f"sc{next(_prefixes)}"
    paths = write(s3, prefix)
    ds = IndexedTFRecordDataset(paths, features={"id": Int64()}, storage_options=s3.options, cache=None,
                                on_error=on_error)
    loader = DataLoader(ds, batch_size=10, num_workers=2)
    s3.requests.clear()
    assert sorted(i for batch in loader for i in batch["id"].tolist()) == list(range(RECORDS))
    assert _shard_heads_and_listings(s3, paths) == (0, 2)  # one listing per worker
    write(s3, prefix, first_id=1000)  # the same sizes, other values
    with pytest.raises(RemoteError, match=r"data-train\.tfrecord-0000\d-of-00003: the object changed since it was "
                                          r"listed.*make the dataset again"):
        list(loader)

def _tf_shard(folder, records: int) -> tuple[str, list[int]]:
    """One shard of ``records`` Examples written by tf.io.TFRecordWriter (an
    ``id`` and a ``pad`` of 0-2,000 bytes: ~1 KB a record), and the ids as
    TensorFlow reads them back."""
    import tensorflow as tf

    path = str(folder / "tf-shard.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(records):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                "pad": tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes([i % 251]) * (i * 7 % 2001)])),
            })).SerializeToString())
    description = {"id": tf.io.FixedLenFeature([], tf.int64)}
    read = [int(tf.io.parse_single_example(r, description)["id"]) for r in tf.data.TFRecordDataset(path)]
    return path, read


@pytest.mark.parametrize("options", [{}, pytest.param({"shuffle": True}, marks=pytest.mark.slow)],
                         ids=["in-order", "shuffled"])
def test_a_reader_following_a_fill_given_up_mid_read_reads_every_record(s3, tmp_path, monkeypatch, options):
    """A reader follows another process's fill of a shard (the fill file's
    part written) and that fill is given up -- its file cut to 0 bytes --
    between the reader's look at the file and its read of it. The read comes
    back short; it must look again (then take over the copy or read the
    bucket), never hand on the short bytes: every record as TensorFlow reads
    it, under the default on_error="raise"."""
    from tfrecord_torch.io.filling import FillView

    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    local, expected = _tf_shard(tmp_path, 3_000)
    url = f"s3://bucket/sc{next(_prefixes)}/tf-shard.tfrecord"
    s3.fs().put(local, url.split("://", 1)[1])
    with open(local, "rb") as f:
        data = f.read()
    assert ids(dataset(s3, [url], None)) == expected  # indexes the shard (kept in the index cache)
    cache = ShardCache(str(tmp_path / "shards"))
    size, version = files.size_and_version(url, s3.options)
    give_up = threading.Event()
    download = shardcache._download

    def other_process(url, fd, size, storage_options, cancel=None, checked=None, check=None, budget=None):
        if threading.current_thread() is not other:
            return download(url, fd, size, storage_options, cancel, checked, check, budget)
        os.pwrite(fd, data[:size // 2], 0)  # half the object, then the fill is given up (cancelled)
        assert give_up.wait(60)

    monkeypatch.setattr(shardcache, "_download", other_process)
    other = threading.Thread(  # stands for another process: flock excludes another open file alike
        target=lambda: shardcache.open_shard(url, cache, size=size, version=version, storage_options=s3.options))
    other.start()
    fill = shardcache.fill_path(shardcache.entry_path(cache, url, size, version))
    deadline = time.monotonic() + 30
    while not (os.path.exists(fill) and os.path.getsize(fill) >= size // 2) and time.monotonic() < deadline:
        time.sleep(0.001)
    look = FillView._look
    held = []

    def look_then_given_up(self, want):
        fd, written = look(self, want)
        if fd is not None and fd == self._fill and not give_up.is_set():
            held.append(want)
            give_up.set()  # the filler gives up now: its file is cut to 0 bytes before this reader reads it
            other.join(60)
        return fd, written

    monkeypatch.setattr(FillView, "_look", look_then_given_up)
    got = ids(dataset(s3, [url], cache, **options))
    assert held and not other.is_alive()  # the reader read the other fill's part, and that fill ended in between
    assert got == ids(dataset(s3, [url], None, **options))  # the planned order, read from the bucket
    assert sorted(got) == expected
