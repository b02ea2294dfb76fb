"""Shards in a bucket without index objects (as TensorFlow writes them), read with
the default shard cache: indexing a shard needs all of its bytes, and so does its
copy, so the shard is downloaded once for both -- not once to index it and once
more to copy it. Against moto's S3 server on 127.0.0.1, every request logged."""

from collections import Counter

import numpy as np
import pytest
import torch
from helpers import ids_of
from torch.utils.data import DataLoader, RandomSampler

from tfrecord_torch import IndexedTFRecordDataset, Int64, RecordWriter, Source, TFRecordDataset, make_example

from .test_remote import S3, with_bucket

SHARDS, PER_SHARD = 3, 150
FEATURES = {"id": Int64()}
_prefixes = iter(range(10_000))


@pytest.fixture(scope="module")
def s3():
    yield from with_bucket(S3())


@pytest.fixture
def shards(s3, tmp_path, monkeypatch):
    """Fresh shard objects (no index objects, nothing in the index cache or the
    shard cache yet: both point into this test's tmp_path)."""
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index-cache"))
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(tmp_path / "shard-cache"))
    prefix = f"tf{next(_prefixes)}"
    urls = []
    for k in range(SHARDS):
        url = f"s3://bucket/{prefix}/train-{k}.tfrecord"
        with RecordWriter(url, storage_options=s3.options) as w:
            for i in range(k * PER_SHARD, (k + 1) * PER_SHARD):
                w.write(make_example({"id": i, "pad": np.full(64, i, np.int64)}))
        urls.append(url)
    s3.requests.clear()
    return urls


def bytes_fetched(s3, urls) -> Counter:
    """Bytes of each shard object the server was asked for by GETs (whole or ranged)."""
    sizes = {"/" + u.split("://", 1)[1]: (u, s3.fs().size(u)) for u in urls}
    out: Counter = Counter()
    for method, path, asked in s3.requests:
        if method != "GET" or path not in sizes:
            continue
        url, size = sizes[path]
        if asked:
            first, last = asked.split("=", 1)[1].split("-")
            out[url] += min(int(last) if last else size - 1, size - 1) - int(first) + 1
        else:
            out[url] += size
    return out


@pytest.mark.parametrize("make", [pytest.param("iterable", marks=pytest.mark.slow), "map-style"])
def test_an_unindexed_shard_is_downloaded_once_for_its_index_and_its_records(s3, shards, make):
    so = s3.options
    if make == "iterable":
        ds = TFRecordDataset(shards, features=FEATURES, shuffle=True, seed=1, storage_options=so)
        got = ids_of(DataLoader(ds, batch_size=None, num_workers=2))
    else:
        ds = IndexedTFRecordDataset(shards, features=FEATURES, storage_options=so)
        order = list(RandomSampler(ds, generator=torch.Generator().manual_seed(0)))
        got = [int(i) for batch in DataLoader(ds, batch_size=32, sampler=order, num_workers=2) for i in batch["id"]]
        assert got == order
    fetched = bytes_fetched(s3, shards)
    assert sorted(got) == list(range(SHARDS * PER_SHARD))
    for url in shards:
        size = s3.fs().size(url)
        # the copy's bytes, plus at most the 12-byte sniff that tells a plain shard from
        # a compressed one: not a second pass over the shard to index it
        assert size <= fetched[url] <= size + 12, (url, fetched[url], size)
    if make == "iterable":  # the records and their order: those of range reads without the cache
        oracle = TFRecordDataset(shards, features=FEATURES, shuffle=True, seed=1, storage_options=so,
                                 source=Source(cache=None))
        assert got == ids_of(DataLoader(oracle, batch_size=None, num_workers=2))
