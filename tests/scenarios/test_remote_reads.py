"""Reads from a bucket (moto's S3 server on 127.0.0.1, every request
logged): how many range requests a record costs in each mode, with
DataLoader workers and ranks, and that every record still comes exactly once."""

import numpy as np
import pytest
from torch.utils.data import DataLoader

from tfrecord_torch import Int64, ShardedWriter, Sharding, Shuffling, TFRecordDataset, make_example
from tfrecord_torch.io import ranges

from .test_remote import S3

RECORDS = 1024
BLOCK = 16


@pytest.fixture(scope="module")
def s3():
    import urllib.request

    server = S3()
    endpoint = server.options["client_kwargs"]["endpoint_url"]
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bucket", method="PUT")).read()
    yield server
    server.close()


@pytest.fixture(scope="module")
def shards(s3):
    """Two shards of 512 records each, ids 0..1023, with their indexes beside them."""
    with ShardedWriter("s3://bucket/reads", name="data", max_records=RECORDS // 2,
                       storage_options=s3.options) as w:
        for i in range(RECORDS):
            w.write(make_example({"id": i, "pad": np.zeros(64, np.int64)}))
    return w.paths


@pytest.fixture
def unmerged(monkeypatch, tmp_path):
    """Ranges fetched as asked: near records are not joined into one request,
    so the count shows how the plan groups records."""
    monkeypatch.setattr(ranges, "MERGE_GAP", 0)
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))


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
                             storage_options=s3.options, sharding=Sharding(rank=rank, world_size=world_size))
        ids += [int(i) for batch in DataLoader(ds, batch_size=32, num_workers=workers) for i in batch["id"]]
    assert sorted(ids) == list(range(RECORDS))  # exactly once over ranks and workers
    assert ids != sorted(ids)
    readers = world_size * max(workers, 1)
    # a block per request; a reader's share may cut a block at each of its two ends
    assert shard_gets(s3) <= RECORDS // BLOCK + 2 * readers


def test_block_shuffle_mixes_blocks_from_the_whole_dataset_in_each_worker(s3, shards, unmerged):
    ds = TFRecordDataset(shards, features={"id": Int64()}, shuffle=Shuffling(block=BLOCK), seed=5,
                         storage_options=s3.options)
    batches = [b["id"].tolist() for b in DataLoader(ds, batch_size=64, num_workers=2)]
    first = batches[0]
    assert len({i // BLOCK for i in first}) > 16  # records of many blocks in one batch, not one block
    assert len({i // 512 for b in batches[:2] for i in b}) == 2  # both shards in the first batches
