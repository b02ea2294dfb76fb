"""Remote shards read the way the README reads them, with no cache argument, against
moto's S3 server on 127.0.0.1 (every request logged): the shards are copied to the
default shard cache once and read from there (far below one shard GET per record, none
in the next epoch), the records and their order equal a read of the same shards from
local disk, nothing is written to the bucket, and ``cache=None``,
``TFRECORD_TORCH_SHARD_CACHE=off``, a dataset too large for the disk and an
unwritable cache folder read by range requests instead, with the same records."""

import dataclasses
import logging
import os
import shutil
from collections import Counter

import numpy as np
import pytest
import torch
from helpers import ids_of
from torch.utils.data import DataLoader, RandomSampler

from tfrecord_torch import (
    IndexedTFRecordDataset,
    Int64,
    ReadBudget,
    RecordWriter,
    ShardCache,
    Source,
    TFRecordDataset,
    make_example,
)
from tfrecord_torch.io.budget import RequestBudget
from tfrecord_torch.io.shardcache import shard_cache_usage

from .test_remote import S3, with_bucket

SHARDS, PER_SHARD = 4, 200
RECORDS = SHARDS * PER_SHARD
PATTERN = "s3://bucket/default/train-*.tfrecord"
FEATURES = {"id": Int64()}


@pytest.fixture(scope="module")
def s3():
    server = S3()
    yield from with_bucket(server)


@pytest.fixture(scope="module")
def shards(s3, tmp_path_factory):
    """Four shards of 200 records (ids 0..799 in file order) in the bucket, with no
    index objects (as TensorFlow writes them), and the same shards on local disk."""
    local = tmp_path_factory.mktemp("local")
    urls = []
    for k in range(SHARDS):
        url = f"s3://bucket/default/train-{k}.tfrecord"
        with RecordWriter(url, storage_options=s3.options) as w:
            for i in range(k * PER_SHARD, (k + 1) * PER_SHARD):
                w.write(make_example({"id": i, "pad": np.full(32, i, np.int64)}))
        s3.fs().get_file(url.split("://", 1)[1], str(local / f"train-{k}.tfrecord"))
        urls.append(url)
    return urls, str(local / "train-*.tfrecord")


IMAGE_SIZED = ReadBudget(windowed=0, requests=RequestBudget(gap=0))
"""Range reads as of records the size of images, the budget of every remote
dataset here: no two records are joined into one request nor fetched in
windows of a shard, so an uncached shuffled read costs one GET per record."""


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The default shard cache folder, not made yet (nor its parent); HOME moved too,
    so nothing of these tests can reach the real ~/.cache."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = tmp_path / "cache" / "tfrecord_torch" / "shards"
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(folder))
    return folder


def shard_requests(s3, urls, method: str = "GET") -> Counter:
    """Requests of ``method`` for each shard object since the log was cleared."""
    keys = {"/" + url.split("://", 1)[1]: url for url in urls}
    return Counter(keys[path] for m, path, _ in s3.requests if m == method and path in keys)


def copy_requests(s3, urls) -> Counter:
    """GETs of each whole shard object (a copy's) since the log was cleared;
    the records' own range requests are left out."""
    sizes = {"/" + url.split("://", 1)[1]: (url, s3.fs().size(url.split("://", 1)[1])) for url in urls}
    return Counter(sizes[path][0] for m, path, r in s3.requests
                   if m == "GET" and path in sizes and r in (None, f"bytes=0-{sizes[path][1] - 1}"))


def bucket_keys(s3) -> set[str]:
    return set(s3.fs().find("bucket"))


# Epoch 0 streams shards without index objects (tests/scenarios/test_remote_first_epoch.py);
# the tests here read by index from the first epoch that does, on a machine that has not
# indexed the shards yet: ds.set_epoch(1) indexes them as opening them did before.
INDEXED = 1


def loader_ids(ds, epoch: int, **kwargs) -> list[int]:
    ds.set_epoch(epoch)
    return ids_of(DataLoader(ds, batch_size=None, num_workers=2, **kwargs))


def shuffled(pattern, s3, source: Source | None = None):
    """A shuffled dataset of ``pattern`` read with ``source`` and the budget :data:`IMAGE_SIZED`."""
    source = dataclasses.replace(source or Source(), read_budget=IMAGE_SIZED)
    return TFRecordDataset(pattern, features=FEATURES, shuffle=True, seed=3, storage_options=s3.options, source=source)


def local_order(shards, epoch: int) -> list[int]:
    """The oracle: the same shards read from local disk, with the same seed and epoch."""
    return loader_ids(TFRecordDataset(shards[1], features=FEATURES, shuffle=True, seed=3), epoch)


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_a_shuffled_loader_copies_each_shard_once_and_reads_the_next_epoch_from_disk(s3, shards, folder, tmp_path,
                                                                                    monkeypatch):
    # an index cache of its own: the test process's is shared by the xdist workers, which write
    # the same objects (same URLs, sizes and ETags) for this module's other tests
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    urls = shards[0]
    keys = bucket_keys(s3)
    s3.requests.clear()
    ds = shuffled(PATTERN, s3)  # the shards have no index objects: each is copied, and indexed from its copy
    first = loader_ids(ds, INDEXED)
    assert copy_requests(s3, urls) == dict.fromkeys(urls, 1)  # each shard copied once, by one request
    # indexing copied them (no index objects), so the records came from the copies:
    # per shard only the 12-byte sniff for compression beside the copy
    others = shard_requests(s3, urls) - copy_requests(s3, urls)
    sniffs = Counter(url for url in urls for m, path, r in s3.requests
                     if m == "GET" and path == "/" + url.split("://", 1)[1] and r == "bytes=0-11")
    assert others == sniffs == dict.fromkeys(urls, 1)
    assert first == local_order(shards, INDEXED)
    writes = [r for r in s3.requests if r[0] not in ("GET", "HEAD")]
    s3.requests.clear()
    second = loader_ids(ds, INDEXED + 1)
    assert shard_requests(s3, urls) == {}  # no shard GET: read from the copies
    # each worker asks once whether the objects are still the listed ones: one listing of their folder
    assert shard_requests(s3, urls, "HEAD") == {}
    assert sum(1 for m, path, _ in s3.requests if m == "GET" and path.rstrip("/") == "/bucket") == 2
    assert second == local_order(shards, INDEXED + 1) and second != first
    writes += [r for r in s3.requests if r[0] not in ("GET", "HEAD")]
    assert writes == [] and bucket_keys(s3) == keys  # nothing written to the bucket or beside the shards
    # the copies are the shards' bytes (the bucket may hold other tests' objects too)
    assert shard_cache_usage(ShardCache(str(folder))) == (SHARDS, sum(s3.fs().size(u) for u in urls))


@pytest.mark.slow  # fork: about 6 s of CPU; spawn: workers importing torch
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_use_the_folder_decided_when_the_dataset_was_made(s3, shards, folder, tmp_path, monkeypatch,
                                                                  context):
    ds = shuffled(PATTERN, s3)
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(elsewhere))  # seen by the workers, not the dataset
    s3.requests.clear()
    assert loader_ids(ds, INDEXED, multiprocessing_context=context) == local_order(shards, INDEXED)
    assert shard_cache_usage(ShardCache(str(folder)))[0] == SHARDS
    assert not elsewhere.exists()


def test_map_style_with_a_random_sampler_reads_from_the_copies(s3, shards, folder):
    urls = shards[0]
    ds = IndexedTFRecordDataset(PATTERN, features=FEATURES, storage_options=s3.options,
                                source=Source(read_budget=IMAGE_SIZED))
    local = IndexedTFRecordDataset(shards[1], features=FEATURES)
    order = list(RandomSampler(ds, generator=torch.Generator().manual_seed(0)))
    s3.requests.clear()
    got = ids_of(DataLoader(ds, batch_size=32, sampler=order, num_workers=2))
    assert got == [int(local[i]["id"]) for i in order] and sorted(got) == list(range(RECORDS))
    # copied in the background while the workers read: at most once each (a worker's
    # copies in progress end with it)
    assert all(n <= 1 for n in copy_requests(s3, urls).values())


def range_reads(s3, shards, ds) -> list[int]:
    """The first epoch of ``ds``, checked to be read by about one range request per record."""
    s3.requests.clear()
    got = loader_ids(ds, INDEXED)
    assert got == local_order(shards, INDEXED)
    assert sum(shard_requests(s3, shards[0]).values()) > RECORDS // 2  # ~1 per record, not 1 per shard
    return got


# The reads by range requests below cost a request per record (800) against moto, about 15 s
# of CPU each: slow. The decisions themselves are checked fast in tests/unit/io/test_shardcache.py.
@pytest.mark.slow
def test_cache_none_reads_by_range_requests(s3, shards, folder):
    range_reads(s3, shards, shuffled(PATTERN, s3, source=Source(cache=None)))
    assert not folder.parent.exists()


@pytest.mark.slow
def test_the_environment_turns_the_default_cache_off(s3, shards, folder, tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", "off")
    range_reads(s3, shards, shuffled(PATTERN, s3))
    assert not folder.parent.exists() and not (tmp_path / "home").exists()
    ds = IndexedTFRecordDataset(PATTERN, features=FEATURES, storage_options=s3.options,
                                source=Source(read_budget=IMAGE_SIZED))
    s3.requests.clear()
    assert [int(ds[i]["id"]) for i in (5, 400, 799)] == [5, 400, 799]
    assert sum(shard_requests(s3, shards[0]).values()) == 3


@pytest.mark.slow
def test_a_dataset_larger_than_the_default_limit_reads_by_ranges_and_says_so(s3, shards, folder, monkeypatch,
                                                                            caplog):
    real = shutil.disk_usage
    size = sum(s3.fs().size(url.split("://", 1)[1]) for url in shards[0])

    def small_disk(path):  # a disk with the dataset's size free: half of it does not hold the dataset
        return real(path)._replace(free=size)

    monkeypatch.setattr(shutil, "disk_usage", small_disk)
    with caplog.at_level(logging.WARNING, logger="tfrecord_torch.io.shardcache"):
        ds = shuffled(PATTERN, s3)
    (line,) = [r.getMessage() for r in caplog.records if "shard" in r.getMessage()]
    assert f"the remote shards ({size:,} bytes) are more than the shard cache {folder}" in line
    assert "reading them by range requests" in line
    assert "Source(cache=ShardCache(directory=..., limit=...))" in line and "cache=None" in line
    range_reads(s3, shards, ds)
    assert not folder.parent.exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["read-only", "under-a-file"])
def test_an_unwritable_cache_folder_reads_by_ranges(s3, shards, folder, caplog, how):
    if how == "read-only":
        folder.mkdir(parents=True)
        folder.chmod(0o500)
        if os.access(folder, os.W_OK):
            folder.chmod(0o700)
            pytest.skip("this user writes into a read-only folder (root)")
    else:  # a file where a folder of the path should be: not even root can make the cache
        folder.parent.parent.mkdir(parents=True)
        folder.parent.write_bytes(b"")
    try:
        with caplog.at_level(logging.WARNING, logger="tfrecord_torch.io.shardcache"):
            ds = shuffled(PATTERN, s3)
        assert f"the shard cache {folder} cannot be written" in caplog.text
        range_reads(s3, shards, ds)
        assert not folder.exists() or os.listdir(folder) == []
    finally:
        if folder.exists():
            folder.chmod(0o700)


def write_shard(url: str, ids, storage_options) -> None:
    with RecordWriter(url, storage_options=storage_options) as w:
        for i in ids:
            w.write(make_example({"id": i, "pad": np.full(32, i, np.int64)}))


# about 5 s of CPU with the cache, 15 s without (it reads by ranges): slow; a shard indexed again
# after another writer rewrote it stays fast below
@pytest.mark.slow
@pytest.mark.parametrize(("cache", "named"), [("auto", "glob"), (None, "glob"), (None, "folder"),
                                              (None, "list")])
def test_a_dataset_made_again_after_another_writer_rewrote_a_shard_reads_the_new_shard(s3, folder, cache, named,
                                                                                       tmp_path, monkeypatch):
    """One process keeps fsspec's filesystem object (and its listings) all along, as a
    user's does, and makes a dataset of the shards (a glob, their folder or a list of
    them) for each epoch: a shard rewritten by another writer between two epochs
    (larger: 150 records, not 100) is read whole by the next dataset; with the shard
    cache, the new object is copied once and not read by ranges, the other shards are
    read from their copies."""
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))  # no index another test cached
    urls = [f"s3://bucket/rewritten/train-{k}.tfrecord" for k in range(4)]
    for k, url in enumerate(urls):
        write_shard(url, range(100 * k, 100 * (k + 1)), s3.options)
    pattern = {"glob": "s3://bucket/rewritten/train-*.tfrecord", "folder": "s3://bucket/rewritten", "list": urls}[named]
    source = Source(cache=cache)
    for epoch in (0, 1):  # a dataset made for each epoch
        assert sorted(loader_ids(shuffled(pattern, s3, source=source), epoch)) == list(range(400))
    other_writer = {**s3.options, "skip_instance_cache": True}  # another process's filesystem object
    write_shard(urls[2], range(1000, 1150), other_writer)
    new_size = s3.fs().info(urls[2].split("://", 1)[1], refresh=True)["size"]
    s3.requests.clear()
    got = loader_ids(shuffled(pattern, s3, source=source), 2)
    assert sorted(got) == [*range(200), *range(300, 400), *range(1000, 1150)]
    if cache is not None:
        rewritten = "/" + urls[2].split("://", 1)[1]
        gets = [r for m, path, r in s3.requests if m == "GET" and path == rewritten]
        assert sorted(gets, key=str) == sorted([f"bytes=0-{new_size - 1}", "bytes=0-11"], key=str)  # copy, sniff
        assert shard_requests(s3, [u for u in urls if u != urls[2]]) == {}  # read from their copies


def test_a_shard_indexed_again_after_another_writer_rewrote_it_gets_the_new_shards_index(s3, tmp_path,
                                                                                        monkeypatch):
    """``shard_index(url)`` in a process that listed the shard's folder before (its
    fsspec filesystem keeps that listing) indexes the shard as it is now: another
    writer rewrote it with 150 records, not 100, and the index has 150 entries."""
    from tfrecord_torch.records.shardindex import shard_index

    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))
    url = "s3://bucket/reindexed/train-0.tfrecord"
    write_shard(url, range(100), s3.options)
    ds = TFRecordDataset("s3://bucket/reindexed/*.tfrecord", features=FEATURES, storage_options=s3.options,
                         source=Source(cache=None, read_budget=IMAGE_SIZED))
    assert sorted(int(r["id"]) for r in ds) == list(range(100))  # the folder listed, and kept by s3fs
    assert len(shard_index(url, storage_options=s3.options)) == 100
    write_shard(url, range(150), {**s3.options, "skip_instance_cache": True})  # another process's writer
    assert len(shard_index(url, storage_options=s3.options)) == 150
