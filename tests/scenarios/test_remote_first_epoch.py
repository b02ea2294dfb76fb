"""Remote shards without index objects (a TF team's bucket): opening them reads no shard
body, epoch 0 streams each shard once (every record once over ranks and workers, the
indexes built as it goes and kept in the index cache), and later epochs read by those
indexes in the global permutation. Requests and bytes are counted in the log of a real
S3 endpoint on 127.0.0.1 (moto's server)."""

from __future__ import annotations

import gc
import pickle
import threading
import types
import warnings

import pytest
import torch.utils.data
from helpers import ids_of

from tfrecord_torch import (
    RecordWriter,
    ShardCache,
    Sharding,
    Shuffling,
    Source,
    TFRecordDataset,
    make_example,
)
from tfrecord_torch.records.index import writer_index_path
from tfrecord_torch.records.shardindex import clear_index_cache, remote_shard_index

from .test_remote import S3, cache, with_bucket  # noqa: F401 - the fixtures

SHARDS = 8
PER_SHARD = 12
TOTAL = SHARDS * PER_SHARD


@pytest.fixture(scope="module")
def s3():
    yield from with_bucket(S3())


@pytest.fixture(scope="module")
def shards(s3):
    """Shards written one by one, as tf.io.TFRecordWriter leaves them: no index objects."""
    urls = [f"s3://bucket/first/train-{i:05d}-of-{SHARDS:05d}" for i in range(SHARDS)]
    for i, url in enumerate(urls):
        with RecordWriter(url, storage_options=s3.options) as w:
            for j in range(PER_SHARD):
                w.write(make_example({"id": i * PER_SHARD + j, "pad": b"x" * (50 + 7 * j)}))
    fs = s3.fs()
    assert not any(fs.exists(writer_index_path(u)) or fs.exists(u + ".index") for u in urls)
    return urls


def sizes(s3, urls) -> dict[str, int]:
    fs = s3.fs()
    return {u.split("://", 1)[1]: fs.size(u) for u in urls}


def shard_bytes(s3, urls) -> int:
    """Body bytes of the GETs of the shards in the log (a range as asked, cut at the object's end)."""
    known = sizes(s3, urls)
    total = 0
    for method, path, asked in s3.requests:
        size = known.get(path.lstrip("/"))
        if method != "GET" or size is None:
            continue
        if asked is None:
            total += size
            continue
        start, _, end = asked.removeprefix("bytes=").partition("-")
        total += max(0, min(int(end or size - 1), size - 1) - int(start) + 1)
    return total


def shard_gets(s3, urls) -> list:
    names = {"/" + u.split("://", 1)[1] for u in urls}
    return [r for r in s3.requests if r[0] == "GET" and r[1] in names]


def open_ds(s3, paths="s3://bucket/first/train-*", **kw):
    kw.setdefault("source", Source(cache=None))
    return TFRecordDataset(paths, storage_options=s3.options, **kw)


@pytest.mark.parametrize("shuffle", [False, Shuffling(buffer=4)])
def test_opening_reads_no_shard_body_and_the_first_record_reads_few(s3, shards, cache, shuffle):  # noqa: F811
    """The first record waits for the shards a reader interleaves (and a shuffle buffer's fill), not for all."""
    s3.requests.clear()
    ds = open_ds(s3, shuffle=shuffle)
    assert shard_gets(s3, shards) == []  # not even a 12-byte sniff
    assert len(s3.requests) <= 3, s3.requests  # the listing (and the index folder's): nothing per shard
    assert ds.streamed and all(i is None for i in ds.indexes)
    with pytest.raises(TypeError, match=r"len\(\) is unknown in epoch 0: 8 of 8 remote shards have no index"):
        len(ds)
    s3.requests.clear()
    next(iter(ds))
    opened = {r[1] for r in shard_gets(s3, shards)}
    assert 1 <= len(opened) <= Shuffling().cycle_length


@pytest.mark.parametrize("copies", [False, True])
def test_epoch_0_fetches_each_byte_once_and_epoch_1_reads_by_the_cached_indexes(s3, shards, cache, tmp_path,  # noqa: F811
                                                                                copies):
    total = sum(sizes(s3, shards).values())
    source = Source(cache=ShardCache(str(tmp_path / "shards")) if copies else None)
    s3.requests.clear()
    ds = open_ds(s3, shuffle=True, seed=3, source=source)
    first = ids_of(ds)
    assert sorted(first) == list(range(TOTAL)) and first != sorted(first)
    assert shard_bytes(s3, shards) <= 1.05 * total  # opening and epoch 0 together
    s3.requests.clear()
    second = ids_of(ds)  # epoch 1: the global permutation, by the indexes epoch 0 built
    assert sorted(second) == list(range(TOTAL)) and second != first
    assert not ds.streamed and len(ds) == TOTAL and ds.shuffle_buffer == 0
    scanned = [remote_shard_index(u, ds._indexes.listing, "auto", True, s3.options) for u in shards]
    assert [i.tolist() for i in ds.indexes] == [i.tolist() for i in scanned]
    if copies:  # the copies epoch 0 kept: no shard byte fetched again
        assert shard_bytes(s3, shards) == 0
    else:  # records by range: the shards once more at most, no scan on top
        assert shard_bytes(s3, shards) <= 1.05 * total


def test_epoch_1_on_a_machine_without_the_indexes_builds_them(s3, shards, cache):  # noqa: F811
    ds = open_ds(s3, shuffle=True)
    ds.set_epoch(1)  # as a rank resumed on a fresh machine: the epoch's mode does not hang on a cache
    clear_index_cache()
    got = ids_of(ds)
    assert sorted(got) == list(range(TOTAL)) and not ds.streamed


def readers(s3, workers: int, world: int, monkeypatch, epoch: int | None = None, **kw) -> list[list[int]]:
    """The ids each (rank, worker) reader yields in one epoch (``epoch``, else
    the first), each from its own pickled copy; ``workers=0``: the rank's own."""
    got = []
    for rank in range(world):
        ds = open_ds(s3, sharding=Sharding(rank=rank, world_size=world), **kw)
        if epoch is not None:
            ds.set_epoch(epoch)
        if not workers:
            got.append(ids_of(ds))
        for worker in range(workers):
            info = types.SimpleNamespace(id=worker, num_workers=workers)
            monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda info=info: info)
            got.append(ids_of(pickle.loads(pickle.dumps(ds))))
            monkeypatch.undo()
    return got


@pytest.mark.parametrize("shuffle", [False, True])
def test_epoch_0_reads_every_record_once_over_two_ranks_of_two_workers(s3, shards, cache, monkeypatch,  # noqa: F811
                                                                       shuffle):
    got = readers(s3, 2, 2, monkeypatch, shuffle=shuffle, seed=5)
    assert sorted(i for ids in got for i in ids) == list(range(TOTAL))
    assert all(len(ids) == 2 * PER_SHARD for ids in got)  # whole shards, two each
    assert readers(s3, 2, 2, monkeypatch, shuffle=shuffle, seed=5) == got  # seeded: the same again


UNEVEN = [5, 0, 1, 7, 3]  # an empty shard and a shard of one record among them


@pytest.fixture(scope="module")
def uneven(s3):
    """Shards of UNEVEN records, no index objects; ids 0, 1, ... in shard order."""
    ids = iter(range(sum(UNEVEN)))
    for k, n in enumerate(UNEVEN):
        with RecordWriter(f"s3://bucket/uneven/train-{k:05d}", storage_options=s3.options) as w:
            for _ in range(n):
                w.write(make_example({"id": next(ids)}))
    return "s3://bucket/uneven/train-*"


@pytest.mark.parametrize("world, workers, batch_size", [(1, 0, None), (1, 3, None), (2, 1, None), (2, 3, None),
                                                        (3, 0, None), (3, 2, None), (3, 3, None), (3, 3, 2)])
def test_epochs_0_and_1_read_every_record_once_over_any_ranks_and_workers(s3, uneven, cache, monkeypatch,  # noqa: F811
                                                                           world, workers, batch_size):
    """More readers than shards: each rank is still dealt a shard in epoch 0 (indexed, the shards' records
    would be split over it), not a ValueError saying a rank reads nothing."""
    for epoch in (0, 1):
        with warnings.catch_warnings():  # an idle DataLoader worker warns
            warnings.simplefilter("ignore", RuntimeWarning)
            got = readers(s3, workers, world, monkeypatch, epoch=epoch, paths=uneven, shuffle=True, seed=1,
                          batch_size=batch_size)
        assert sorted(i for ids in got for i in ids) == list(range(sum(UNEVEN))), epoch


def library_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("tfrecord_torch"))


@pytest.mark.parametrize("how", ["not started", "break", "exception", "exhausted"])
def test_an_epoch_0_iterator_ended_any_way_leaves_no_thread(s3, shards, cache, tmp_path, how):  # noqa: F811
    """Copying the shards ahead of the reader (the shard cache) stops with the iterator, also with one
    made and dropped before its first record."""
    before = library_threads()
    ds = open_ds(s3, shuffle=True, source=Source(cache=ShardCache(str(tmp_path / "shards"), ahead=2)))
    it = iter(ds)
    if how == "exhausted":
        assert len(list(it)) == TOTAL
    elif how != "not started":
        next(it)
    if how == "exception":
        with pytest.raises(KeyError):
            it.throw(KeyError("the training step failed"))
    del it
    gc.collect()
    assert library_threads() == before


def test_a_batch_mode_epoch_0_streams_and_epoch_1_reads_by_index(s3, shards, cache):  # noqa: F811
    ds = open_ds(s3, shuffle=True, batch_size=5)
    for _ in range(2):
        got = [int(i) for batch in ds for i in batch["id"].flatten()]
        assert sorted(got) == list(range(TOTAL))
    assert not ds.streamed and len(ds) == -(-TOTAL // 5)


@pytest.mark.slow  # DataLoader workers
def test_len_counts_from_epoch_1_read_by_dataloader_workers(s3, shards, cache):  # noqa: F811
    """The main process knows the epoch its DataLoader workers read, without ds.set_epoch."""
    ds = open_ds(s3, shuffle=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert sorted(ids_of(loader)) == list(range(TOTAL))  # epoch 0
    with pytest.raises(TypeError, match=r"len\(\) is unknown in epoch 0"):
        len(loader)
    it = iter(loader)  # epoch 1
    first = ids_of([next(it)])
    assert len(loader) == len(ds) == TOTAL and ds.epoch == 1
    assert sorted(first + ids_of(it)) == list(range(TOTAL))


def test_resume_mid_epoch_0_reads_the_rest_exactly(s3, shards, cache):  # noqa: F811
    whole = ids_of(open_ds(s3, shuffle=True, seed=9))
    clear_index_cache()
    ds = open_ds(s3, shuffle=True, seed=9)
    it = iter(ds)
    head = [int(next(it)["id"][0]) for _ in range(30)]
    state = ds.state_dict()
    del it
    again = open_ds(s3, shuffle=True, seed=9)
    again.load_state_dict(state)
    assert head + ids_of(again) == whole


def test_resume_mid_epoch_1_in_a_new_dataset_reads_the_rest_exactly(s3, shards, cache):  # noqa: F811
    ds = open_ds(s3, shuffle=True, seed=2)
    ids_of(ds)  # epoch 0
    whole = ids_of(ds)  # epoch 1
    ds = open_ds(s3, shuffle=True, seed=2)
    ds.set_epoch(1)
    it = iter(ds)
    head = [int(next(it)["id"][0]) for _ in range(40)]
    state = ds.state_dict()
    del it
    again = open_ds(s3, shuffle=True, seed=2)  # a new process would open in epoch 0's mode
    again.load_state_dict(state)
    assert head + ids_of(again) == whole


def test_resume_of_epoch_0_under_another_layout_is_refused_saying_why(s3, shards, cache):  # noqa: F811
    ds = open_ds(s3, shuffle=True)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    del it
    other = open_ds(s3, shuffle=True, sharding=Sharding(rank=0, world_size=2))
    with pytest.raises(ValueError, match=r"streamed \(compressed, or in epoch 0 remote shards without index"):
        other.load_state_dict(state)


def test_shards_with_index_objects_and_even_splits_are_indexed_when_opened(s3, shards, cache):  # noqa: F811
    ds = open_ds(s3, sharding=Sharding(rank=0, world_size=2, even="drop"))
    assert not ds.streamed and len(ds) == TOTAL // 2
