"""Small remote shards read a window at a time in a shuffled iteration: when
windows are used, that every record still comes once in the planned order
with each window fetched once, and that a damaged record in a window is
raised with its location, or skipped and counted under on_error="skip"."""

import numpy as np
import pytest

import tfrecord_torch as tt
from tfrecord_torch.data import windows
from tfrecord_torch.data.windows import shard_windows
from tfrecord_torch.errors import CorruptRecordError
from tfrecord_torch.io import pool
from tfrecord_torch.io.budget import ReadBudget, RequestBudget


def index_of(sizes: list[int]) -> np.ndarray:
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return np.stack([offsets, np.asarray(sizes, np.int64)], axis=1)


def test_windows_are_used_for_small_remote_shards_a_reader_reads_a_fair_share_of():
    small = [index_of([100] * 1000)] * 4  # 4 shards of 100 KB
    urls = [f"s3://b/s{i}" for i in range(4)]
    budget = ReadBudget()
    assert shard_windows(urls, small, 2000, [False] * 4, budget).paths == frozenset(urls)
    assert shard_windows([f"/data/s{i}" for i in range(4)], small, 2000, [False] * 4, budget) is None  # local shards
    assert shard_windows(urls, small, 2000, [True] * 4, budget) is None  # read from their copies
    assert shard_windows(urls, small, 4000 // windows.WINDOW_SHARE - 1, [False] * 4, budget) is None  # a small share
    large = [index_of([1 << 20] * 20)] * 4  # 80 MiB
    assert shard_windows(urls, large, 80, [False] * 4, budget) is None


@pytest.fixture
def small_shards(tmp_path):
    folder = f"memory://windows/{tmp_path.name}"
    with tt.ShardedWriter(folder, name="ds", max_records=3000) as w:
        for i in range(12_000):
            w.write(tt.make_example({"id": i, "x": np.full(4, i % 5, np.float32)}))
    return w.paths


def test_a_shuffled_read_through_windows_gives_the_planned_order_and_fetches_each_window_once(
        small_shards, monkeypatch):
    requests = RequestBudget(longest=16 << 10)  # several windows per shard
    reads: list[tuple[str, int, int]] = []
    read = pool.Reader.read

    def counted(self, offset, size, *args):
        reads.append((self.path, offset, size))
        return read(self, offset, size, *args)

    monkeypatch.setattr(pool.Reader, "read", counted)
    ds = tt.TFRecordDataset(small_shards, features={"id": tt.Int64()}, shuffle=True, seed=7,
                            source=tt.Source(cache=None, read_budget=ReadBudget(requests=requests)))
    ds.set_epoch(0)
    got = [int(item["id"]) for item in ds]
    fetched = list(reads)
    reference = tt.TFRecordDataset(  # each record by its own range: the reference
        small_shards, features={"id": tt.Int64()}, shuffle=True, seed=7,
        source=tt.Source(cache=None, read_budget=ReadBudget(windowed=0, requests=requests)))
    reference.set_epoch(0)
    assert got == [int(item["id"]) for item in reference]
    assert sorted(got) == list(range(12_000))
    assert len(fetched) == len(set(fetched))  # no window fetched twice
    sizes = {path: len(ds.indexes[k]) for k, path in enumerate(small_shards)}
    assert len(fetched) < sum(sizes.values()) // 100  # windows, not records
    whole = sum(int(ix[-1, 0] + ix[-1, 1]) for ix in ds.indexes)
    assert sum(size for _, _, size in fetched) == whole  # every byte once


def test_a_damaged_record_in_a_window_is_reported_with_its_location(small_shards):
    import fsspec

    ds = tt.TFRecordDataset(small_shards, features={"id": tt.Int64()}, shuffle=True, seed=7,
                            source=tt.Source(cache=None))
    offset = int(ds.indexes[1][1234, 0])
    fs = fsspec.filesystem("memory")
    path = small_shards[1].split("://", 1)[1]
    data = bytearray(fs.cat_file(path))
    data[offset + 14] ^= 0xFF  # a payload byte: the record's CRC no longer matches
    fs.pipe_file(path, bytes(data))
    with pytest.raises(CorruptRecordError) as caught:
        for _ in ds:
            pass
    assert caught.value.record == 1234 and caught.value.offset == offset
    skipping = tt.TFRecordDataset(small_shards, features={"id": tt.Int64()}, shuffle=True, seed=7,
                                  source=tt.Source(cache=None), on_error="skip")
    assert sorted(int(item["id"]) for item in skipping) == [i for i in range(12_000) if i != 3000 + 1234]
    assert skipping.errors()["total"] == 1
