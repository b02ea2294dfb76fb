"""Reads from a bucket (moto's S3 server on 127.0.0.1, every request
logged): how many range requests a record costs in each mode, with
DataLoader workers and ranks, and that every record still comes exactly once."""

import dataclasses
import gc
import os
import threading
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from tfrecord_torch import (
    IndexedTFRecordDataset,
    Int64,
    ReadBudget,
    ShardCache,
    ShardedWriter,
    Sharding,
    Shuffling,
    Source,
    TFRecordDataset,
    make_example,
)
from tfrecord_torch.io.budget import RequestBudget
from tfrecord_torch.io.copies import FILLS
from tfrecord_torch.io.shardcache import shard_cache_usage
from tfrecord_torch.records.frames import compiled_frames

from .test_remote import S3, _cut, with_bucket


class CountingS3(S3):
    """The moto server, each shard GET held ``delay`` seconds (a far bucket)
    with the most GETs seen in flight at once, and faults on shard GETs:
    ``fail_500`` answers 500, ``drop`` cuts a body short. With ``gate`` set
    to n, the shard GETs after the next n wait until ``opened`` is set (or
    ``GATE_WAIT`` seconds: a reader waited for them, counted in ``overdue``,
    and the gate opens)."""

    GATE_WAIT = 5.0  # under the client's read timeout

    def __init__(self) -> None:
        super().__init__()
        self.delay, self.peak, self.flying = 0.0, 0, 0
        self.gate: int | None = None
        self.opened = threading.Event()
        self.arrived = threading.Event()  # set by each shard GET
        self.overdue = 0
        self.lock = threading.Lock()

    def handle(self, environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        shard = method == "GET" and "/reads/data-train.tfrecord-" in path and not path.endswith(".index")
        if not shard:
            return self.app(environ, start_response)
        self.requests.append((method, path, environ.get("HTTP_RANGE")))
        self.arrived.set()
        with self.lock:
            self.flying += 1
            self.peak = max(self.peak, self.flying)
            fail = self.fail_500 > 0
            drop = not fail and self.drop > 0
            self.fail_500 -= fail
            self.drop -= drop
            held = self.gate is not None and self.gate <= 0
            if self.gate is not None:
                self.gate -= 1
        try:
            if held and not self.opened.wait(self.GATE_WAIT):
                with self.lock:
                    self.overdue += 1
                self.opened.set()  # noted: the rest pass
            time.sleep(self.delay)
            if fail:
                start_response("500 Internal Server Error", [("Content-Type", "application/xml")])
                return [b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"]
            body = b"".join(self.app(environ, start_response))
            return _cut(body) if drop else [body]
        finally:
            with self.lock:
                self.flying -= 1

RECORDS = 1024
BLOCK = 16
RANGES = Source(cache=None)  # what is counted here is the records' range requests, with no shard cache


@pytest.fixture(scope="module")
def s3():
    yield from with_bucket(CountingS3())


@pytest.fixture(scope="module")
def shards(s3):
    """Two shards of 512 records each, ids 0..1023, with their indexes beside them."""
    with ShardedWriter("s3://bucket/reads", name="data", max_records=RECORDS // 2,
                       storage_options=s3.options) as w:
        for i in range(RECORDS):
            w.write(make_example({"id": i, "pad": np.zeros(64, np.int64)}))
    return w.paths


UNMERGED = ReadBudget(windowed=0, requests=RequestBudget(gap=0))  # see the fixture unmerged


@pytest.fixture
def unmerged(monkeypatch, tmp_path):
    """The source of ranges fetched as asked (:data:`RANGES` read with the
    budget :data:`UNMERGED`): near records are not joined into one request,
    nor fetched in windows of the shard, so the count shows how the plan
    groups records."""
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    return Source(cache=None, read_budget=UNMERGED)


@pytest.fixture
def far(s3, monkeypatch, tmp_path):
    """Shard GETs take 20 ms each; only this package retries (s3fs and
    botocore give up at once), quickly."""
    import s3fs

    from tfrecord_torch.io import retry

    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    monkeypatch.setattr(retry, "BACKOFF", 0.01)
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    s3.delay, s3.peak, s3.fail_500, s3.drop = 0.02, 0, 0, 0
    yield {**s3.options, "config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}}}
    s3.delay, s3.fail_500, s3.drop = 0.0, 0, 0


def shard_gets(s3) -> int:
    return sum(1 for method, path, _ in s3.requests
               if method == "GET" and "/reads/data-train.tfrecord-" in path and not path.endswith(".index"))


@pytest.mark.parametrize("world_size, workers", [(1, 0), (1, 2), (2, 2)])
def test_block_shuffle_reads_a_block_per_request_with_workers_and_ranks(s3, shards, unmerged, world_size,
                                                                       workers):
    ids = []
    s3.requests.clear()
    for rank in range(world_size):
        ds = TFRecordDataset(shards, features={"id": Int64()}, shuffle=Shuffling(block=BLOCK), seed=5,
                             storage_options=s3.options, sharding=Sharding(rank=rank, world_size=world_size),
                             source=unmerged)
        ids += [int(i) for batch in DataLoader(ds, batch_size=32, num_workers=workers) for i in batch["id"]]
    assert sorted(ids) == list(range(RECORDS))  # exactly once over ranks and workers
    assert ids != sorted(ids)
    readers = world_size * max(workers, 1)
    # a block per request; a reader's share may cut a block at each of its two ends
    assert shard_gets(s3) <= RECORDS // BLOCK + 2 * readers


def test_block_shuffle_mixes_blocks_from_the_whole_dataset_in_each_worker(s3, shards, unmerged):
    ds = TFRecordDataset(shards, features={"id": Int64()}, shuffle=Shuffling(block=BLOCK), seed=5,
                         storage_options=s3.options, source=unmerged)
    batches = [b["id"].tolist() for b in DataLoader(ds, batch_size=64, num_workers=2)]
    first = batches[0]
    assert len({i // BLOCK for i in first}) > 16  # records of many blocks in one batch, not one block
    assert len({i // 512 for b in batches[:2] for i in b}) == 2  # both shards in the first batches


@pytest.mark.slow  # 1,024 range requests held 0.1 s: about 20 s of CPU
def test_shuffled_records_are_requested_together_in_order(s3, shards, far, unmerged):
    s3.delay = 0.1  # long enough that requests sent together overlap on a busy machine
    ds = TFRecordDataset(shards, features={"id": Int64()}, shuffle=True, seed=1, storage_options=far, source=unmerged)
    got = [int(i) for batch in DataLoader(ds, batch_size=64) for i in batch["id"]]
    s3.delay = 0.0
    expected = TFRecordDataset(shards, features={"id": Int64()}, shuffle=True, seed=1, storage_options=far, source=unmerged)
    expected.set_epoch(0)
    assert got == [int(b["id"]) for b in expected]  # the planned order, the same as a second reading
    assert sorted(got) == list(range(RECORDS))
    assert s3.peak > 4  # many range requests in flight, not one after the other


@pytest.mark.slow  # about 12 s of CPU
def test_map_style_batches_are_requested_together(s3, shards, far, unmerged):
    s3.delay = 0.1
    ds = IndexedTFRecordDataset(shards, features={"id": Int64()}, storage_options=far, source=unmerged)
    sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(0))
    order = list(sampler)
    got = [int(i) for batch in DataLoader(ds, batch_size=64, sampler=order) for i in batch["id"]]
    assert got == order
    assert s3.peak > 4


@pytest.fixture
def gated(s3):
    """Shard GETs held at a gate (see CountingS3), opened again after the test."""
    s3.opened.clear()
    s3.overdue = 0
    yield s3
    s3.gate = None
    s3.opened.set()


@pytest.mark.slow  # about 20 s of CPU a case
@pytest.mark.parametrize("workers", [0, 2])
def test_the_first_items_wait_for_a_small_first_read_not_a_whole_group(s3, shards, far, unmerged, gated, workers):
    source = Source(cache=None, read_budget=dataclasses.replace(UNMERGED, first=512))  # about five 109-byte records
    ds = TFRecordDataset(shards, features={"id": Int64()}, shuffle=True, seed=1, storage_options=far, source=source)
    plain = [int(b["id"]) for b in TFRecordDataset(shards, features={"id": Int64()}, shuffle=True, seed=1,
                                                   storage_options=far, source=source)]
    gated.gate = 16 * max(workers, 1)  # a reader's first read group (256 records) is ~200 GETs
    batches = iter(DataLoader(ds, batch_size=4, num_workers=workers))
    first = next(batches)
    assert gated.overdue == 0  # the first batch needed only GETs let through
    gated.opened.set()
    got = batch_ids([first, *batches])
    assert sorted(got) == list(range(RECORDS))
    if workers == 0:
        assert got == plain  # the planned order
    assert gated.overdue == 0


def test_the_first_read_begins_at_iter_before_an_item_is_asked_for(s3, shards, far):
    ds = TFRecordDataset(shards, features={"id": Int64()}, shuffle=True, seed=1, storage_options=far, source=RANGES)
    plain = [int(b["id"]) for b in TFRecordDataset(shards, features={"id": Int64()}, shuffle=True, seed=1,
                                                   storage_options=far, source=RANGES)]
    s3.arrived.clear()
    items = iter(ds)  # as a DataLoader worker does at its start, before its first index comes
    assert s3.arrived.wait(30)  # a shard GET came in with no item asked for
    assert [int(item["id"]) for item in items] == plain  # the planned order
    unused = iter(ds)
    del unused  # dropped before its first item: its read-ahead stops
    gc.collect()
    assert not [t for t in threading.enumerate() if t.name == "tfrecord_torch-readahead"]


# about 15 s of CPU a case: slow; faults are retried fast in tests/scenarios/test_remote_faults.py
@pytest.mark.slow
@pytest.mark.parametrize("fault", ["fail_500", "drop"])
def test_faults_in_flight_are_retried_without_losing_or_repeating_a_record(s3, shards, far, unmerged, fault):
    setattr(s3, fault, 3)  # fewer than the attempts one range gets, wherever they land
    ds = TFRecordDataset(shards, features={"id": Int64()}, shuffle=Shuffling(block=BLOCK), seed=2,
                         storage_options=far, source=unmerged)
    got = [int(i) for batch in DataLoader(ds, batch_size=64, num_workers=2) for i in batch["id"]]
    assert getattr(s3, fault) == 0
    setattr(s3, fault, 0)
    clean = TFRecordDataset(shards, features={"id": Int64()}, shuffle=Shuffling(block=BLOCK), seed=2,
                            storage_options=far, source=unmerged)
    assert got == [int(i) for batch in DataLoader(clean, batch_size=64, num_workers=2) for i in batch["id"]]
    assert sorted(got) == list(range(RECORDS))
    mapped = IndexedTFRecordDataset(shards, features={"id": Int64()}, storage_options=far, source=unmerged)
    setattr(s3, fault, 3)  # fewer than the attempts one range gets, wherever they land
    order = torch.randperm(RECORDS, generator=torch.Generator().manual_seed(3)).tolist()
    assert [int(i) for b in DataLoader(mapped, batch_size=100, sampler=order) for i in b["id"]] == order
    assert getattr(s3, fault) == 0


@pytest.mark.parametrize("source", [RANGES, Source(index=False, cache=None)], ids=["indexed", "streamed"])
def test_breaking_off_leaves_no_read_ahead_thread(s3, shards, far, source):
    ds = TFRecordDataset(shards, features={"id": Int64()}, shuffle=True, storage_options=far, source=source)
    for item in ds:
        assert 0 <= int(item["id"]) < RECORDS
        break
    assert not [t for t in threading.enumerate() if t.name == "tfrecord_torch-readahead"]
    assert sorted(int(item["id"]) for item in ds) == list(range(RECORDS))


MANY = 8 * FILLS  # shards: more than the copies made at once, so a cold cache is still filling at the first batch


@pytest.fixture(scope="module")
def many(s3):
    """MANY shards of 16 records each, ids 0..16 * MANY - 1, with their indexes beside them."""
    with ShardedWriter("s3://bucket/many/reads", name="data", max_records=16, storage_options=s3.options) as w:
        for i in range(MANY * 16):
            w.write(make_example({"id": i, "pad": np.zeros(64, np.int64)}))
    return w.paths


def batch_ids(batches) -> list[int]:
    return [i for batch in batches for i in batch["id"].reshape(-1).tolist()]


def copy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tfrecord_torch-copy-ahead"]


@pytest.mark.parametrize("batched", [False, True], ids=["records", "batch mode"])
def test_an_in_order_read_of_small_shards_requests_several_shards_at_once(s3, many, far, monkeypatch, batched):
    # Before, an in-order read fetched one shard's records after another's: a
    # bucket of small shards cost a round trip per shard (64 shards of 2.5 MB:
    # 3.4 s against the bare client's 1.0 s), and batch mode a round trip per
    # shard of each batch. Now consecutive small shards are one group (a batch's
    # shards are fetched together), their requests in flight together, each run
    # still cut and checked in one compiled call, each byte fetched once.
    one_by_one = records_passed_to(monkeypatch, "parse_frame")
    ds = TFRecordDataset(many, features={"id": Int64()}, storage_options=far, source=RANGES,
                         batch_size=64 if batched else None)
    iter(ds).close()  # the indexes are read before the count
    s3.requests.clear()
    s3.delay, s3.peak = 0.1, 0  # long enough that requests sent together overlap on a busy machine
    assert batch_ids(DataLoader(ds, batch_size=None if batched else 16)) == list(range(MANY * 16))
    assert s3.peak >= 4  # a batch's 4 shards, or a group's 24, requested at once, not one after another
    assert one_by_one == []
    assert fetched_bytes(s3) == shard_bytes(many, s3)
    assert shard_gets(s3) == MANY


def test_an_in_order_read_of_small_shards_resumes_inside_a_joined_group(s3, many, far):
    # The groups that join small shards span several shards: a resume counts its
    # records across them, and neither repeats nor drops one.
    ds = TFRecordDataset(many, features={"id": Int64()}, storage_options=far, source=RANGES)
    it = iter(ds)
    first = [int(next(it)["id"]) for _ in range(37)]  # inside the third shard of the first group
    state = ds.state_dict()
    it.close()
    resumed = TFRecordDataset(many, features={"id": Int64()}, storage_options=far, source=RANGES)
    resumed.load_state_dict(state)
    assert first + [int(item["id"]) for item in resumed] == list(range(MANY * 16))


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_a_cold_cache_gives_the_first_batch_before_the_shards_are_copied(s3, many, far, tmp_path, fills):
    cache = ShardCache(str(tmp_path / "shards"))
    ds = TFRecordDataset(many, features={"id": Int64()}, shuffle=True, storage_options=far, source=Source(cache=cache))
    plain = TFRecordDataset(many, features={"id": Int64()}, shuffle=True, storage_options=far, source=RANGES)
    batches = iter(DataLoader(ds, batch_size=16))
    first = next(batches)
    assert shard_cache_usage(cache)[0] < MANY  # read from the bucket while the copies are filled
    got = batch_ids([first, *batches])
    assert got == batch_ids(DataLoader(plain, batch_size=16))
    assert fills == dict.fromkeys(many, 1)  # each shard copied once
    s3.requests.clear()
    again = batch_ids(DataLoader(ds, batch_size=16))
    assert shard_gets(s3) == 0  # the next epoch reads the copies
    assert again == batch_ids(DataLoader(plain, batch_size=16)) and again != got
    cold = TFRecordDataset(many, features={"id": Int64()}, shuffle=True, storage_options=far,
                           source=Source(cache=ShardCache(str(tmp_path / "cold"))))
    for batch in DataLoader(cold, batch_size=16):  # broken off while the copies are filled
        assert len(batch["id"]) == 16
        break
    del batch
    gc.collect()
    assert not copy_threads()


def test_a_cold_cache_gives_a_random_samplers_first_batch_before_the_shards_are_copied(s3, many, far, tmp_path,
                                                                                       fills):
    cache = ShardCache(str(tmp_path / "shards"))
    ds = IndexedTFRecordDataset(many, features={"id": Int64()}, storage_options=far, cache=cache)
    order = list(RandomSampler(ds, generator=torch.Generator().manual_seed(0)))
    batches = iter(DataLoader(ds, batch_size=16, sampler=order))
    first = next(batches)
    touched = {ds.locate(i)[0] for i in order[:16]}
    assert shard_cache_usage(cache)[0] < len(touched)  # read from the bucket while the copies are filled
    assert batch_ids([first, *batches]) == order
    ds.close()  # stops copying
    assert not copy_threads()
    assert all(n == 1 for n in fills.values())  # no shard copied twice


@pytest.mark.parametrize("cache", ["ranges", "shard cache"])
def test_a_workers_first_request_parses_no_botocore_data_again(s3, shards, tmp_path, monkeypatch, cache):
    from botocore.loaders import JSONFileLoader

    parsed = tmp_path / "parsed"
    load_file = JSONFileLoader.load_file

    def noted(self, file_path):
        with open(parsed, "a") as f:
            f.write(f"{os.getpid()} {file_path}\n")
        return load_file(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", noted)  # forked workers inherit it
    source = RANGES if cache == "ranges" else Source(cache=ShardCache(str(tmp_path / "shards")))
    ds = TFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options, source=source)
    got = [int(i) for batch in DataLoader(ds, batch_size=64, num_workers=2, multiprocessing_context="fork")
           for i in batch["id"]]
    assert sorted(got) == list(range(RECORDS))
    in_workers = [line for line in (parsed.read_text().splitlines() if parsed.exists() else [])
                  if int(line.split()[0]) != os.getpid()]
    assert in_workers == []  # the parent's parsed service model and endpoint rules serve the workers' clients


SMALL_PER_SHARD = 5000  # records of ~60 bytes: a shard of ~300 KB, a group's records ~5 KB apart in it


@pytest.fixture(scope="module")
def small(s3):
    """Four shards of SMALL_PER_SHARD small records each, ids 0..4 * SMALL_PER_SHARD - 1."""
    with ShardedWriter("s3://bucket/small/reads", name="data", max_records=SMALL_PER_SHARD,
                       storage_options=s3.options) as w:
        for i in range(4 * SMALL_PER_SHARD):
            w.write(make_example({"id": i, "x": np.full(8, i % 7, np.float32)}))
    return w.paths


def fetched_bytes(s3) -> int:
    """The body bytes of the shard range GETs logged (each asks ``bytes=a-b``)."""
    total = 0
    for method, path, asked in s3.requests:
        if method == "GET" and "/reads/data-train.tfrecord-" in path and not path.endswith(".index"):
            first, last = asked.split("=")[1].split("-")
            total += int(last) - int(first) + 1
    return total


def shard_bytes(paths, s3) -> int:
    return sum(s3.fs().size(p.split("://", 1)[1]) for p in paths)


# fast: records without workers; the other cases (about 3 s of CPU each) are slow
@pytest.mark.parametrize("batched, workers", [
    pytest.param(batched, workers, id=f"{'batch mode' if batched else 'records'}-{workers}",
                 marks=() if (batched, workers) == (False, 0) else pytest.mark.slow)
    for workers in (0, 2) for batched in (False, True)])
def test_a_shuffled_read_of_small_shards_fetches_each_byte_about_once(s3, small, tmp_path, monkeypatch, workers,
                                                                      batched):
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    batching = {"batch_size": 256} if batched else {}

    def loader():
        ds = TFRecordDataset(small, features={"id": Int64()}, shuffle=True, seed=3, storage_options=s3.options,
                             source=RANGES, **batching)
        return DataLoader(ds, batch_size=None if batched else 256, num_workers=workers)

    loader()  # the indexes are read before the count
    s3.requests.clear()
    got = batch_ids(loader())
    fetched, gets = fetched_bytes(s3), shard_gets(s3)
    assert sorted(got) == list(range(4 * SMALL_PER_SHARD))
    if workers == 0:
        assert got == batch_ids(loader())  # the planned order, read again
    # each reader fetches the windows of the shards it reads once: not the shards again for every group
    assert fetched <= max(workers, 1) * shard_bytes(small, s3)
    assert gets <= max(workers, 1) * len(small)  # a window per request (a shard here), not a request per record


@pytest.mark.slow  # 1,024 random range reads against moto: about 12 s of CPU
def test_random_batches_of_small_records_fetch_at_most_merge_ratio_times_their_bytes(s3, small, tmp_path,
                                                                                     monkeypatch):
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    ds = IndexedTFRecordDataset(small, features={"id": Int64()}, storage_options=s3.options, cache=None)
    order = torch.randperm(len(ds), generator=torch.Generator().manual_seed(4))[:1024].tolist()
    s3.requests.clear()
    assert [int(i) for b in DataLoader(ds, batch_size=256, sampler=order) for i in b["id"]] == order
    used = sum(int(ds.indexes[shard][r, 1]) for shard, r in map(ds.locate, order))
    assert fetched_bytes(s3) <= 4 * used  # ranges.MERGE_RATIO: not the bytes between far records


def records_passed_to(monkeypatch, name: str) -> list:
    """The ``record=`` of each call of ``tfrecord_torch.data.reading.<name>``
    from now on (the function still runs)."""
    from tfrecord_torch.data import reading

    calls: list = []
    original = getattr(reading, name)

    def counted(*args, **kwargs):
        calls.append(kwargs.get("record"))
        return original(*args, **kwargs)

    monkeypatch.setattr(reading, name, counted)
    return calls


@pytest.mark.parametrize("cache", ["ranges", "shard cache"])
def test_an_in_order_read_checks_runs_of_records_not_each_record_apart(s3, shards, tmp_path, monkeypatch, cache):
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    one_by_one = records_passed_to(monkeypatch, "parse_frame")
    source = RANGES if cache == "ranges" else Source(cache=ShardCache(str(tmp_path / "shards")))
    ds = TFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options, source=source)
    for epoch in range(2):  # with the cache: the copies are filled, then complete
        ds.set_epoch(epoch)
        assert [int(item["id"]) for item in ds] == list(range(RECORDS))
    assert one_by_one == []  # scanned a run at a time (compiled from a complete copy), not frame by frame


@pytest.mark.skipif(not compiled_frames(), reason="the compiled reader is not built")
@pytest.mark.parametrize("cache", ["ranges", "shard cache"])
def test_an_in_order_read_of_sound_records_cuts_each_window_in_one_compiled_call(s3, shards, tmp_path,
                                                                                   monkeypatch, cache):
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    scans = records_passed_to(monkeypatch, "iter_chunks")
    source = RANGES if cache == "ranges" else Source(cache=ShardCache(str(tmp_path / "shards")))
    ds = TFRecordDataset(shards, features={"id": Int64()}, storage_options=s3.options, source=source)
    assert [int(item["id"]) for item in ds] == list(range(RECORDS))  # a cold copy: read while it is filled
    assert scans == []  # no frame checked by the Python scan

