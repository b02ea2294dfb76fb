"""Opening datasets over remote shards: one listing, then each shard's facts fetched
concurrently; with index objects beside the shards, under two requests per shard (counted
in the log of a real S3 endpoint on 127.0.0.1, moto's server), and the same records."""

import gzip
import logging
import threading

import numpy as np
import pytest
from helpers import ids_of

from tfrecord_torch import (
    IndexedTFRecordDataset,
    RecordWriter,
    ShardedWriter,
    TFRecordDataset,
    load_index,
    make_example,
)
from tfrecord_torch.records.index import writer_index_path

from .test_remote import S3, Overlap, cache, is_listing, s3  # noqa: F401 - the fixtures

SHARDS = 12
COUNTS = [5] * (SHARDS - 1) + [3]


@pytest.fixture(scope="module")
def remote(s3):  # noqa: F811
    fast = {k: v for k, v in s3.options.items() if k != "skip_instance_cache"}
    with ShardedWriter("s3://bucket/open", name="data", max_records=max(COUNTS), storage_options=fast) as w:
        for i in range(sum(COUNTS)):
            w.write(make_example({"id": i}))
    return w.paths


@pytest.fixture
def so(s3):  # noqa: F811
    """Options under which fsspec keeps one filesystem object (as it does by default),
    emptied of any listing it cached before the test."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    yield {k: v for k, v in s3.options.items() if k != "skip_instance_cache"}
    s3fs.S3FileSystem.clear_instance_cache()


def _opened(s3, make):  # noqa: F811
    s3.requests.clear()
    ds = make()
    return ds, list(s3.requests)


def _shard_reads(requests):
    return [r for r in requests if r[0] == "GET" and "/open/data-train.tfrecord-" in r[1]
            and not r[1].endswith(".index")]


def test_the_index_folder_is_listed_beside_the_shards(s3, so, cache, remote, monkeypatch):  # noqa: F811
    """Named shards and their index folder are listed at once: the second
    listing leaves before the first is answered (one round trip, not two)."""
    overlap = Overlap(s3, monkeypatch, is_listing, is_listing)
    ds, requests = _opened(s3, lambda: TFRecordDataset(remote, storage_options=so))
    listings = [r for r in requests if r[0] == "GET" and r[1].strip("/") == "bucket"]
    assert len(listings) == 2 and overlap.overlapped
    assert [len(i) for i in ds.indexes] == COUNTS  # each index from its object, none scanned
    assert _shard_reads(requests) == []


class InFlight:
    """Holds each request ``picked`` picks until ``expected`` of them have
    come in (at most ``timeout`` s in all): :attr:`most` is the largest
    number in flight at once."""

    def __init__(self, s3, monkeypatch, picked, expected: int, timeout: float = 5.0) -> None:  # noqa: F811
        self.most = self._now = self._came = 0
        self._cond = threading.Condition()
        app = s3.app

        def wrapped(environ, start_response):
            if not picked(environ["REQUEST_METHOD"], environ["PATH_INFO"]):
                return app(environ, start_response)
            with self._cond:
                self._came += 1
                self._now += 1
                self.most = max(self.most, self._now)
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._came >= expected, timeout)
                self._now -= 1
            return app(environ, start_response)

        monkeypatch.setattr(s3, "app", wrapped)


def test_index_objects_of_many_shards_are_asked_for_together(s3, so, cache, monkeypatch):  # noqa: F811
    """40 shards' index objects: 32 requests in flight at once (an S3
    filesystem's connections), so two round trips, not three."""
    with ShardedWriter("s3://bucket/many", name="m", max_records=1, storage_options=so) as w:
        for i in range(40):
            w.write(make_example({"id": i}))
    inflight = InFlight(s3, monkeypatch, lambda method, path: method == "GET" and path.endswith(".index"), 32)
    ds = TFRecordDataset("s3://bucket/many/m-train.tfrecord-*", storage_options=so)
    assert inflight.most == 32
    assert [len(i) for i in ds.indexes] == [1] * 40
    assert sorted(ids_of(ds)) == list(range(40))


@pytest.mark.parametrize("how", ["glob", "folder", "list"])
def test_open_with_index_objects_costs_under_two_requests_per_shard(s3, so, cache, remote, how):  # noqa: F811
    source = {"glob": "s3://bucket/open/data-train.tfrecord-*", "folder": "s3://bucket/open",
              "list": remote}[how]
    ds, requests = _opened(s3, lambda: TFRecordDataset(source, storage_options=so))
    assert ds.paths == remote
    assert len(requests) < 2 * SHARDS, requests
    assert _shard_reads(requests) == []  # the shards' own bytes are not touched to open them
    index_gets = [r for r in requests if r[0] == "GET" and r[1].endswith(".index")]
    assert len(index_gets) == SHARDS
    assert [len(i) for i in ds.indexes] == COUNTS
    for path, index in zip(remote, ds.indexes):
        np.testing.assert_array_equal(index, load_index(writer_index_path(path), storage_options=so))
    assert sorted(ids_of(ds)) == list(range(sum(COUNTS)))


def test_map_style_open_costs_under_two_requests_per_shard(s3, so, cache, remote):  # noqa: F811
    ds, requests = _opened(s3, lambda: IndexedTFRecordDataset(remote, storage_options=so))
    assert len(requests) < 2 * SHARDS, requests
    assert len(ds) == sum(COUNTS)
    assert [int(ds[i]["id"][0]) for i in (0, 7, len(ds) - 1)] == [0, 7, len(ds) - 1]


@pytest.mark.parametrize("source", ["s3://bucket/noidx", "s3://bucket/noidx/s*.tfrecord"])
def test_a_cached_index_costs_no_request_per_shard(s3, so, cache, source):  # noqa: F811
    urls = [f"s3://bucket/noidx/s{i}.tfrecord" for i in range(4)]
    for i, url in enumerate(urls):
        with RecordWriter(url, storage_options=so) as w:
            for j in range(3):
                w.write(make_example({"id": 3 * i + j}))
    first = TFRecordDataset(source, storage_options=so)
    assert sorted(ids_of(first)) == list(range(12))  # epoch 0 streams the shards and caches their indexes
    ds, requests = _opened(s3, lambda: TFRecordDataset(source, storage_options=so))
    # A folder costs a stat and a listing, a glob one listing (which would have shown an
    # index object, so none is asked for): nothing per shard. (The first dataset copied
    # the shards, and the copy's change check drops s3fs's cached listing of the
    # folder: one more listing, still none per shard.)
    assert not [r for r in requests if "/noidx/s" in r[1]], requests
    assert len(requests) <= 4, requests
    ds.set_epoch(1)  # epoch 1 reads by the indexes: found in the cache, no request for them
    s3.requests.clear()
    assert len(ds) == 12
    assert not [r for r in s3.requests if "/noidx/s" in r[1]], s3.requests
    assert [len(i) for i in ds.indexes] == [3] * 4
    assert sorted(ids_of(ds)) == list(range(12))


def test_a_stale_index_object_is_rebuilt(s3, so, cache, caplog):  # noqa: F811
    url = "s3://bucket/stale/a.tfrecord"
    with RecordWriter(url, storage_options=so) as w:
        for i in range(6):
            w.write(make_example({"id": i}))
    fs = s3.fs()
    fs.pipe("bucket/stale/a.tfrecord.index", b"0 20\n20 20\n")  # another file's index
    with caplog.at_level(logging.WARNING, logger="tfrecord_torch.records.shardindex"):
        ds = TFRecordDataset("s3://bucket/stale/*.tfrecord", storage_options=so)
    assert "stale index" in caplog.text
    assert ids_of(ds) == list(range(6))


def test_compressed_and_empty_remote_shards(s3, so, cache):  # noqa: F811
    fs = s3.fs()
    with RecordWriter("s3://bucket/mixed/a.tfrecord", storage_options=so) as w:
        for i in range(4):
            w.write(make_example({"id": i}))
    plain = fs.cat_file("bucket/mixed/a.tfrecord")
    fs.pipe("bucket/mixed/b.tfrecord", gzip.compress(plain))  # gzip without a .gz name: sniffed
    fs.pipe("bucket/mixed/c.tfrecord", b"")
    ds, requests = _opened(s3, lambda: TFRecordDataset("s3://bucket/mixed", storage_options=so))
    assert [i is None for i in ds.indexes] == [True, True, False]  # epoch 0 streams what has no index object
    assert not [r for r in requests if r[0] == "GET" and r[1].endswith(".tfrecord")], requests
    assert sorted(ids_of(ds)) == [0, 0, 1, 1, 2, 2, 3, 3]
    s3.requests.clear()
    assert sorted(ids_of(ds)) == [0, 0, 1, 1, 2, 2, 3, 3]  # epoch 1: a by its cached index, b still streamed
    assert [i is None for i in ds.indexes] == [False, True, False]
    sniffs = [r for r in s3.requests if r[0] == "GET" and r[1].endswith("b.tfrecord") and r[2] == "bytes=0-11"]
    assert len(sniffs) == 1


def test_damaged_remote_shards_counted_once_each_when_opened_together(cache):  # noqa: F811
    import fsspec

    mem = fsspec.filesystem("memory")
    for i in range(8):
        url = f"memory://damaged/s{i}.tfrecord"
        with RecordWriter(url) as w:
            for j in range(3):
                w.write(make_example({"id": 3 * i + j}))
        mem.pipe(f"/damaged/s{i}.tfrecord", mem.cat_file(f"/damaged/s{i}.tfrecord") + b"\xff" * 20)  # a bad tail
    ds = TFRecordDataset("memory://damaged", on_error="skip")
    assert sorted(ids_of(ds)) == list(range(24))
    assert ds.errors()["total"] == 8
    assert set(ds.errors()["per_shard"]) == {f"memory://damaged/s{i}.tfrecord" for i in range(8)}
