"""IndexedTFRecordDataset, the map-style dataset: random access by record number, samplers,
random_split, and compressed shards refused."""

import pytest
import torch
from helpers import ids_of, write_shards
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, random_split

from tfrecord_torch import IndexedTFRecordDataset, Int64


def test_indexed_dataset_random_access(tmp_path):
    write_shards(tmp_path, [4, 0, 6, 3])
    ds = IndexedTFRecordDataset(tmp_path)
    assert len(ds) == 13
    assert [int(ds[i]["id"][0]) for i in range(13)] == list(range(13))
    assert int(ds[-1]["id"][0]) == 12
    with pytest.raises(IndexError):
        ds[13]


@pytest.mark.parametrize("workers", [0, 2])
def test_indexed_dataset_with_samplers(tmp_path, workers):
    write_shards(tmp_path, [10, 15])
    ds = IndexedTFRecordDataset(tmp_path, features={"id": Int64()})
    loader = DataLoader(ds, batch_size=4, sampler=RandomSampler(ds, generator=torch.Generator().manual_seed(0)),
                        num_workers=workers)
    assert sorted(ids_of(loader)) == list(range(25))
    seen = []
    for rank in range(3):
        sampler = DistributedSampler(ds, num_replicas=3, rank=rank, shuffle=True, drop_last=True)
        seen.extend(ids_of(DataLoader(ds, batch_size=5, sampler=sampler, num_workers=workers)))
    assert len(seen) == 24 and len(set(seen)) == 24
    train, val = random_split(ds, [20, 5], generator=torch.Generator().manual_seed(1))
    assert sorted(ids_of(DataLoader(train, batch_size=7)) + ids_of(DataLoader(val, batch_size=7))) == list(range(25))


def test_indexed_dataset_refuses_compressed(tmp_path):
    from tfrecord_torch import TFRecordError

    write_shards(tmp_path, [3], compression="gzip")
    with pytest.raises(TFRecordError, match="decompress"):
        IndexedTFRecordDataset(tmp_path)


def test_indexed_dataset_takes_a_source_as_tfrecorddataset_does(tmp_path):
    """``source=Source(...)``: its index, verify and cache options, as the
    keywords give them (here: indexes written beside the shards)."""
    import os

    from tfrecord_torch import Source

    write_shards(tmp_path, [4, 6])
    ds = IndexedTFRecordDataset(tmp_path, features={"id": Int64()}, source=Source(index="beside", verify=False))
    assert [int(ds[i]["id"]) for i in range(10)] == list(range(10))
    shards = [f for f in os.listdir(tmp_path) if f.endswith(".tfrecord")]
    assert len(shards) == 2 and all(os.path.exists(tmp_path / (f + ".index")) for f in shards)
    assert ds.verify is False


@pytest.mark.parametrize("source, keywords, says", [
    ({"index": "beside"}, {"index": "beside"}, "takes index in its source= or as keywords, not both"),
    ({}, {"verify": False}, "takes verify in its source= or as keywords, not both"),
    ({"index": False}, {}, r"Source\(index=False\) \(streamed shards\) is TFRecordDataset's"),
    ({"compression": "gzip"}, {}, "cannot seek in compressed shards"),
    ({"lengths": [4]}, {}, r"Source\(lengths=...\) has nothing to save"),
])
def test_indexed_dataset_says_what_of_a_source_it_cannot_take(tmp_path, source, keywords, says):
    from tfrecord_torch import Source

    write_shards(tmp_path, [4])
    with pytest.raises(ValueError, match=says):
        IndexedTFRecordDataset(tmp_path, source=Source(**source), **keywords)
