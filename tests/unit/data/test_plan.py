"""Who reads what (data/plan.py): every record exactly once over ranks and workers,
even splits, deterministic epoch-dependent shuffles, and rank resolution."""

from collections import Counter

import numpy as np
import pytest

from tfrecord_torch.data.plan import plan_records, plan_shards, ramp_cuts, resolve_rank
from tfrecord_torch.io.budget import ReadBudget

COUNTS = {
    "one": [10],
    "many": [3, 0, 7, 1, 0, 12],
    "empty": [0, 0],
    "fewer_than_readers": [2, 1],
    "big": [1000, 999, 1],
}


def all_records(counts, world, workers, **kw):
    per_rank = []
    for rank in range(world):
        got = []
        for worker in range(workers):
            for seg in plan_records(counts, rank=rank, world_size=world, worker=worker,
                                    num_workers=workers, **kw):
                got.extend((seg.shard, int(r)) for r in seg.records)
        per_rank.append(got)
    return per_rank


@pytest.mark.parametrize("counts", COUNTS.values(), ids=COUNTS.keys())
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("shuffle, block", [(False, 1), (True, 1), (True, 4)])
def test_exactly_once(counts, world, workers, shuffle, block):
    per_rank = all_records(counts, world, workers, shuffle=shuffle, seed=5, epoch=2, block=block)
    everything = [r for rank in per_rank for r in rank]
    expected = [(s, r) for s, n in enumerate(counts) for r in range(n)]
    assert sorted(everything) == expected
    sizes = [len(r) for r in per_rank]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("counts", COUNTS.values(), ids=COUNTS.keys())
@pytest.mark.parametrize("world", [2, 3, 5])
@pytest.mark.parametrize("even", ["pad", "drop"])
@pytest.mark.parametrize("block", [1, 4])
def test_even_modes(counts, world, even, block):
    total = sum(counts)
    per_rank = all_records(counts, world, 2, shuffle=True, seed=1, epoch=0, even=even, block=block)
    sizes = {len(r) for r in per_rank}
    assert len(sizes) == 1
    size = sizes.pop()
    everything = Counter(r for rank in per_rank for r in rank)
    if even == "pad":
        assert size == -(-total // world)
        assert len(everything) == total  # every record at least once
        assert max(everything.values(), default=1) <= 2 or total < world
    else:
        assert size == total // world
        assert max(everything.values(), default=1) == 1
        assert len(everything) == size * world


@pytest.mark.parametrize("world, workers", [(1, 1), (1, 2), (2, 2), (3, 4)])
def test_block_shuffle_gives_each_reader_whole_blocks(world, workers):
    counts, block = [640, 384], 8  # blocks of the epoch's sequence: 8 consecutive global record numbers
    starts = [0, 640]
    blocks_read = 0
    for rank in range(world):
        for worker in range(workers):
            got = [starts[seg.shard] + int(r) for seg in plan_records(
                counts, rank=rank, world_size=world, worker=worker, num_workers=workers, shuffle=True,
                seed=2, epoch=1, block=block) for r in seg.records]
            assert got != sorted(got)  # mixed inside the reader's share
            blocks_read += len({g // block for g in got})
    # each block read by one reader, except at most the two cut at a share's ends
    assert blocks_read <= sum(counts) // block + 2 * world * workers


def test_shuffle_is_deterministic_and_epoch_dependent():
    counts = [50, 50, 50]
    kw = dict(rank=0, world_size=1, worker=0, num_workers=1, shuffle=True, seed=3)

    def flat(epoch):
        return [(s.shard, int(r)) for s in plan_records(counts, epoch=epoch, **kw) for r in s.records]

    assert flat(0) == flat(0)
    assert flat(0) != flat(1)
    assert sorted(flat(0)) == sorted(flat(1))
    first = flat(0)
    assert [r for s, r in first[:50]] != sorted(r for s, r in first[:50])  # permuted inside shards
    seeded = [(s.shard, int(r)) for s in plan_records(counts, epoch=0, **{**kw, "seed": 4}) for r in s.records]
    assert seeded != first


def test_no_shuffle_is_in_order():
    segs = plan_records([3, 2], rank=0, world_size=1, worker=0, num_workers=1, shuffle=False, seed=0, epoch=0)
    assert [(s.shard, s.records.tolist()) for s in segs] == [(0, [0, 1, 2]), (1, [0, 1])]


@pytest.mark.parametrize("shards", [0, 1, 4, 7])
@pytest.mark.parametrize("world, workers", [(1, 1), (2, 3), (3, 2)])
@pytest.mark.parametrize("ranks_first", [False, True])
def test_plan_shards_exactly_once(shards, world, workers, ranks_first):
    got = [s for rank in range(world) for w in range(workers)
           for s in plan_shards(shards, rank=rank, world_size=world, worker=w, num_workers=workers,
                                shuffle=True, seed=0, epoch=1, ranks_first=ranks_first)]
    assert sorted(got) == list(range(shards))


@pytest.mark.parametrize("world, workers", [(2, 2), (3, 3), (3, 1)])
def test_plan_shards_ranks_first_deals_every_rank_a_shard(world, workers):
    for rank in range(world):
        assert plan_shards(world, rank=rank, world_size=world, worker=0, num_workers=workers,
                           shuffle=True, seed=0, epoch=0, ranks_first=True)


def test_resolve_rank(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_rank(None, None) == (0, 1)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert resolve_rank(None, None) == (2, 4)
    assert resolve_rank(1, 3) == (1, 3)
    for rank, world in [(3, 3), (-1, 2), (0, 0), ("0", 1)]:
        with pytest.raises(ValueError, match="rank|world_size"):
            resolve_rank(rank, world)
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK"):
        resolve_rank(None, None)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(ValueError, match="set both or neither"):
        resolve_rank(None, None)  # not silently rank 0 of 1, which would read every record on every rank


def test_bad_even():
    with pytest.raises(ValueError, match="even must be one of"):
        plan_records([1], rank=0, world_size=1, worker=0, num_workers=1, shuffle=False, seed=0,
                     epoch=0, even="round")


def test_ramp_cuts_start_with_a_small_read_and_double_up_to_the_group():
    sizes = np.full(256, 85_000)  # a shuffled group of ~85 KB images
    cuts = ramp_cuts(sizes, ReadBudget(first=1 << 20))
    assert cuts == [12, 37, 86, 185]  # ~1, 2, 4, 8 MiB, then the rest
    assert all(np.cumsum(sizes)[c - 1] <= (1 << 20) * (2 ** (k + 1) - 1) for k, c in enumerate(cuts))
    assert ramp_cuts(np.full(1000, 100), ReadBudget(first=1 << 20)) == []  # a group under the first read: whole
    assert ramp_cuts(np.full(3, 5 << 20), ReadBudget(first=1 << 20)) == [1, 2]  # at least one record per read
    assert ramp_cuts(np.zeros(0, np.int64)) == []
