"""The read budget's cuts, pinned: the start-small-and-double ramps (an
iteration's first reads, an in-order read's windows, a fill's ranges) and
the byte budgets they start from give these sizes for these shards. Moving
the numbers into one value must not move a single cut."""

from __future__ import annotations

import numpy as np
import pytest

from tfrecord_torch.data import reading
from tfrecord_torch.data.plan import ramp_cuts
from tfrecord_torch.data.reading import ReadContext
from tfrecord_torch.io import shardcache
from tfrecord_torch.io.budget import DEFAULT, FillBudget, ReadBudget, RequestBudget

MiB = 1 << 20


@pytest.mark.parametrize(("sizes", "cuts"), [
    (np.full(200, 100 << 10), [10, 30, 71, 153]),  # 1, 2, 4, 8 MiB reads, then the rest of the group
    (np.full(5000, 3 << 10), [341, 1024, 2389]),
    (np.full(3, 5 << 20), [1, 2]),  # at least one record a read
    (np.full(1000, 100), []),  # a group under the first read: whole
    (np.arange(1, 400) * 1000, [45, 78, 120, 176, 254, 362]),
])
def test_an_iterations_first_reads_start_at_1_mib_and_double(sizes, cuts):
    assert ramp_cuts(sizes) == cuts


@pytest.mark.parametrize(("size", "cuts"), [
    (0, []),
    (300_000, [300_000]),
    (MiB, [MiB]),
    (3 * MiB, [MiB, 3 * MiB]),
    (7 * MiB, [MiB, 3 * MiB, 7 * MiB]),
    (20 * MiB, [MiB, 3 * MiB, 7602176, 12058624, 16515072, 20 * MiB]),  # the rest in 4 equal ranges
    (100 * MiB, [MiB, 3 * MiB, *range(11 * MiB, 100 * MiB, 8 * MiB), 100 * MiB]),  # then 8 MiB ranges
])
def test_a_fills_ranges_start_at_1_mib_and_double_below_4_mib(size, cuts):
    ranges = shardcache._ranges_of(size)
    assert [end for _, end in ranges] == cuts
    assert [start for start, _ in ranges] == [0, *cuts][:len(cuts)]


def test_a_gib_fill_asks_for_8_mib_ranges_after_its_first_two():
    lengths = [end - start for start, end in shardcache._ranges_of(1 << 30)]
    assert lengths[:3] == [MiB, 2 * MiB, 8 * MiB]
    assert len(lengths) == 130 and set(lengths[2:-1]) == {8 * MiB}


class _Reader:
    def __init__(self, local: bool) -> None:
        self.local = local

    def descriptor(self):
        return 3 if self.local else None


@pytest.mark.parametrize(("local", "windows"), [
    (True, [MiB, 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 16 * MiB, 16 * MiB, 3 * MiB]),  # up to 16 MiB a local read
    (False, [MiB, 2 * MiB, 4 * MiB, *[4 * MiB] * 14, 3 * MiB]),  # up to a URL's longest request, 4 MiB
])
def test_an_in_order_reads_windows_start_at_1_mib_and_double(monkeypatch, local, windows):
    asked = []

    def fake_iter_ranges(reader, starts, sizes, join):
        asked.append((starts, sizes))
        yield from ()

    monkeypatch.setattr(reading.ranges, "iter_ranges", fake_iter_ranges)
    records = 66 * 16  # 66 MiB of 64 KiB records
    index = np.stack([np.arange(records) * (64 << 10), np.full(records, 64 << 10)], axis=1).astype(np.int64)
    list(reading._windows("shard", index, 0, records - 1, _Reader(local), ReadContext()))
    [(starts, sizes)] = asked
    assert sizes == windows
    assert starts == np.cumsum([0, *windows[:-1]]).tolist()


def test_the_byte_budgets():
    from tfrecord_torch.data.session import ReadSession, RemoteShards
    budget = ReadBudget()
    assert budget.first == ReadSession(RemoteShards(), []).first_far == MiB
    assert budget.early == 4 * MiB
    assert budget.window == budget.far == budget.group == budget.stream == 16 * MiB
    assert budget.requests.longest == budget.fill.chunk == 4 * MiB
    assert budget.fill.longest == 8 * MiB and budget.fill.ahead == 32 * MiB
    assert budget.windowed == budget.read_ahead == budget.requests.in_flight == 64 * MiB
    assert budget.requests.gap == 256 << 10 and budget.fill.write_batch == MiB
    assert DEFAULT == budget  # what a reader, pool or fill given no budget uses


def test_a_budget_is_bytes():
    with pytest.raises(ValueError, match="first"):
        ReadBudget(first=0)
    with pytest.raises(ValueError, match="early"):
        ReadBudget(early=1.5)
    with pytest.raises(ValueError, match="ReadBudget.windowed .* >= 0"):
        ReadBudget(windowed=-1)
    with pytest.raises(ValueError, match="ReadBudget.stream .* >= 0"):
        ReadBudget(stream=-1)
    with pytest.raises(ValueError, match="RequestBudget.gap .* >= 0"):
        RequestBudget(gap=-1)
    with pytest.raises(ValueError, match="RequestBudget.longest"):
        RequestBudget(longest=0)
    with pytest.raises(ValueError, match="FillBudget.write_batch"):
        FillBudget(write_batch=True)
    with pytest.raises(TypeError, match="ReadBudget.fill must be a FillBudget"):
        ReadBudget(fill=RequestBudget())
    assert ReadBudget(windowed=0, requests=RequestBudget(gap=0)).windowed == 0  # 0: no windows, no gap joined


def test_the_one_ramp_doubles_up_to_its_bound():
    from itertools import islice
    assert list(islice(ReadBudget(first=3).ramp(), 5)) == [3, 6, 12, 24, 48]
    assert list(islice(ReadBudget(first=3).ramp(20), 5)) == [3, 6, 12, 20, 20]
    assert list(islice(ReadBudget(first=30).ramp(20), 2)) == [20, 20]


def test_an_in_order_reads_groups_are_cut_at_16_mib():
    from tfrecord_torch.data import recordmode
    index = np.stack([np.arange(40) * (3 * MiB), np.full(40, 3 * MiB)], axis=1).astype(np.int64)
    pieces = recordmode._pieces(index, np.arange(40), ReadBudget().group)
    assert [len(p) for p in pieces] == [5, 5, 5, 6, 5, 5, 6, 3]  # each ends where a 16 MiB multiple is passed


def test_a_shuffled_readers_windows_are_4_mib_slices_of_at_most_64_mib_of_shards():
    from tfrecord_torch.data.windows import shard_windows
    quarter = [np.stack([np.arange(16) * MiB, np.full(16, MiB)], axis=1).astype(np.int64)] * 4  # 4 x 16 MiB
    urls = [f"s3://b/s{i}" for i in range(4)]
    assert shard_windows(urls, quarter, 64, [False] * 4, ReadBudget()) is not None  # 64 MiB: windows
    over = [*quarter[:3], np.concatenate([quarter[3], [[16 * MiB, 1]]])]
    assert shard_windows(urls, over, 65, [False] * 4, ReadBudget()) is None  # a byte more: each record by its own range
    windows, starts, sizes = shard_windows(urls, quarter, 64, [False] * 4, ReadBudget()).missing(
        urls[0], quarter[0], np.array([0, 3, 4, 9, 15]))
    assert (windows, starts, sizes) == ([0, 1, 2, 3], [0, 4 * MiB, 8 * MiB, 12 * MiB], [4 * MiB] * 4)


class _Submitted:
    """A request pool that runs each request when it is submitted, counting them."""

    def __init__(self, *args) -> None:
        self.count = 0

    def submit(self, fn, *args):
        from concurrent.futures import Future
        self.count += 1
        future: Future = Future()
        future.set_result(fn(*args))
        return future

    def close(self, wait=True) -> None:
        pass


def test_a_urls_requests_join_across_256_kib_up_to_4_mib_with_64_mib_in_flight(monkeypatch, tmp_path):
    import fsspec

    from tfrecord_torch.io import pool, ranges
    url = f"memory://budget/{tmp_path.name}/blob"
    fsspec.filesystem("memory").pipe_file(url, b"x")
    asked = []
    read = pool.Reader.read

    def counted(self, offset, size, *args):
        asked.append((offset, size))
        return read(self, offset, size, *args)

    monkeypatch.setattr(pool.Reader, "read", counted)
    kib = 1 << 10
    # 100 KiB ranges 256 KiB apart join, 256 KiB + 1 apart do not; 1 MiB ranges end to end join up to 4 MiB
    offsets = [0, 356 * kib, 712 * kib + 1, *range(2 * MiB, 8 * MiB, MiB)]
    sizes = [100 * kib] * 3 + [MiB] * 6
    ranges.read_ranges(pool.Reader(url), offsets, sizes)
    assert sorted(asked) == [(0, 456 * kib), (712 * kib + 1, 100 * kib), (2 * MiB, 4 * MiB), (6 * MiB, 2 * MiB)]
    held = _Submitted()
    monkeypatch.setattr(ranges, "OwnedPool", lambda *args: held)
    fetched = ranges.iter_ranges(pool.Reader(url), [i * 4 * MiB for i in range(40)], [4 * MiB] * 40, join=False)
    next(fetched)
    assert held.count == 16  # 64 MiB of 4 MiB requests asked before the first is taken
    fetched.close()


def test_a_sources_budget_reaches_the_sessions_pool_readers_contexts_and_windows():
    from tfrecord_torch.data.session import ReadSession, RemoteShards, Scatter
    budget = ReadBudget(far=5000, requests=RequestBudget(gap=0, longest=3000), fill=FillBudget(chunk=2000))
    urls = ["s3://b/s0", "s3://b/s1"]
    indexes = [np.stack([np.arange(100) * 100, np.full(100, 100)], axis=1).astype(np.int64)] * 2
    with ReadSession(RemoteShards(budget=budget), urls, indexes=indexes, scatter=Scatter(200, 1)) as session:
        assert session.readers.budget is budget
        with session.readers.borrow(urls[0]) as reader:
            assert reader.budget is budget  # its far and its requests
        assert session.context.budget is session.first_context.budget is budget
        assert session.context.windows.size == 3000  # each window one request of the budget's longest


def test_a_datasets_budget_is_its_sources(tmp_path):
    import tfrecord_torch as tt
    budget = ReadBudget(group=1000, read_ahead=2000, windowed=0)
    path = str(tmp_path / "a.tfrecord")
    with tt.RecordWriter(path) as w:
        w.write(tt.make_example({"id": 0}))
    ds = tt.TFRecordDataset(path, features={"id": tt.Int64()}, source=tt.Source(read_budget=budget))
    assert ds.remote.budget is budget  # handed to each iteration's read session
    assert tt.TFRecordDataset(path, features={"id": tt.Int64()}).remote.budget == DEFAULT


def test_an_in_order_reads_groups_and_read_ahead_are_its_budgets(tmp_path, monkeypatch):
    import tfrecord_torch as tt
    from tfrecord_torch.data import recordmode
    seen: dict = {"limits": [], "pieces": []}
    fetch_ahead, pieces = recordmode.fetch_ahead, recordmode._pieces

    def noted_fetch_ahead(*args, limit, **kwargs):
        seen["limits"].append(limit)
        return fetch_ahead(*args, limit=limit, **kwargs)

    def noted_pieces(index, records, group):
        got = pieces(index, records, group)
        seen["pieces"] += [int(index[p, 1].sum()) for p in got]
        return got

    monkeypatch.setattr(recordmode, "fetch_ahead", noted_fetch_ahead)
    monkeypatch.setattr(recordmode, "_pieces", noted_pieces)
    path = str(tmp_path / "a.tfrecord")
    with tt.RecordWriter(path) as w:
        for i in range(100):
            w.write(tt.make_example({"id": i}))
    source = tt.Source(read_budget=ReadBudget(group=500, read_ahead=2000))
    ds = tt.TFRecordDataset(path, features={"id": tt.Int64()}, source=source)
    assert [int(x["id"]) for x in ds] == list(range(100))
    assert seen["limits"] == [2000]
    assert len(seen["pieces"]) > 3 and max(seen["pieces"]) <= 500  # groups of at most 500 bytes
