"""Who reads what: pure functions of integers.

A *plan* says, for one reader (a DataLoader worker of one rank), which
records of which shards it reads in an epoch, in order. Over all
``world_size x num_workers`` readers, the plans cover every record exactly
once (or, with ``even="pad"`` / ``"drop"``, give every rank the same count).

With record counts known (indexed shards), the shards are laid end to end
(in a shuffled order when shuffling), that sequence is cut into one
contiguous range per rank and then per worker, and each shard's records are
visited in a permuted order when shuffling. So any number of readers works
with any number of shards, including fewer shards than readers. Without
counts (compressed shards), whole shards are dealt round-robin.

Randomness comes only from ``np.random.default_rng([seed, epoch, ...])``.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

__all__ = ["EVEN_MODES", "RangePlanner", "Segment", "plan_records", "plan_shards", "resolve_rank", "split_range"]

EVEN_MODES = (None, "pad", "drop")


class Segment(NamedTuple):
    """Records ``records`` (int64 array of record numbers) of shard ``shard``."""

    shard: int
    records: np.ndarray


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """The (rank, world_size) to use: the arguments, else torch.distributed
    when initialized, else the RANK / WORLD_SIZE environment, else (0, 1).
    One of ``rank`` and ``world_size`` without the other is an error: mixing
    a given value with a detected one would read another process's share."""
    if (rank is None) != (world_size is None):
        raise ValueError(f"rank={rank!r} and world_size={world_size!r}: pass both or neither "
                         "(neither detects them from torch.distributed or RANK/WORLD_SIZE)")
    if rank is None or world_size is None:
        rank, world_size = _detect_rank()
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
    return rank, world_size


def _detect_rank() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    env_rank, env_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if env_rank is None and env_world is None:
        return 0, 1
    if env_rank is None or env_world is None:  # half a launcher's environment: guessing would read the wrong share
        raise ValueError(f"RANK={env_rank!r} and WORLD_SIZE={env_world!r}: set both or neither "
                         "(or pass rank= and world_size=)")
    try:
        return int(env_rank), int(env_world)
    except ValueError:
        raise ValueError(f"RANK={env_rank!r} and WORLD_SIZE={env_world!r} must be integers") from None


def split_range(start: int, stop: int, part: int, parts: int) -> tuple[int, int]:
    """The ``part``-th of ``parts`` near-equal contiguous pieces of [start, stop)."""
    n = stop - start
    return start + n * part // parts, start + n * (part + 1) // parts


def shard_order(num_shards: int, *, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    if not shuffle:
        return np.arange(num_shards)
    return np.random.default_rng([seed, epoch]).permutation(num_shards)


def rank_positions(total: int, rank: int, world_size: int, even: str | None) -> tuple[int, int]:
    """This rank's [start, stop) in the sequence of ``total`` records; with
    ``even="pad"`` the stop may pass ``total`` (positions wrap around)."""
    if even is None:
        return split_range(0, total, rank, world_size)
    per = -(-total // world_size) if even == "pad" else total // world_size
    return rank * per, (rank + 1) * per


def plan_records(counts, *, rank: int, world_size: int, worker: int, num_workers: int,
                 shuffle: bool, seed: int, epoch: int, even: str | None = None) -> list[Segment]:
    """The records one reader visits in one epoch, shards with known counts.

    Args:
        counts: records in each shard.
        even: None (ranks may differ by one record), "pad" (every rank gets
            ceil(N / world_size), repeating records from the start of the
            epoch's sequence) or "drop" (floor(N / world_size); the last
            records of the sequence are left out this epoch).
    """
    if even not in EVEN_MODES:
        raise ValueError(f"even must be one of {EVEN_MODES}, got {even!r}")
    planner = RangePlanner(counts, shuffle=shuffle, seed=seed, epoch=epoch)
    if planner.total == 0:
        return []
    lo, hi = rank_positions(planner.total, rank, world_size, even)
    return planner.segments(*split_range(lo, hi, worker, num_workers))


class RangePlanner:
    """Maps positions of an epoch's record sequence to (shard, records) segments.

    The sequence is the shards end to end in the epoch's shard order, each
    shard's records in the epoch's permutation of it when shuffling; positions
    past the end wrap around (for padding).
    """

    def __init__(self, counts, *, shuffle: bool, seed: int, epoch: int) -> None:
        self.counts = np.asarray(counts, np.int64)
        self.order = shard_order(len(self.counts), shuffle=shuffle, seed=seed, epoch=epoch)
        self.ordered = self.counts[self.order]
        self.ends = np.cumsum(self.ordered)
        self.total = int(self.ends[-1]) if len(self.ends) else 0
        self.shuffle, self.seed, self.epoch = shuffle, seed, epoch
        self._perms: dict[int, np.ndarray] = {}

    def segments(self, lo: int, hi: int) -> list[Segment]:
        out: list[Segment] = []
        pos = lo
        while pos < hi:
            wrapped = pos % self.total
            slot = int(np.searchsorted(self.ends, wrapped, side="right"))
            shard = int(self.order[slot])
            a = wrapped - int(self.ends[slot] - self.ordered[slot])
            b = min(int(self.ordered[slot]), a + (hi - pos))
            out.append(Segment(shard, self._records(shard)[a:b]))
            pos += b - a
        return out

    def _records(self, shard: int) -> np.ndarray:
        if shard not in self._perms:
            n = int(self.counts[shard])
            self._perms[shard] = (np.random.default_rng([self.seed, self.epoch, shard]).permutation(n)
                                  if self.shuffle else np.arange(n, dtype=np.int64))
        return self._perms[shard]


def plan_shards(num_shards: int, *, rank: int, world_size: int, worker: int, num_workers: int,
                shuffle: bool, seed: int, epoch: int) -> list[int]:
    """Whole shards for one reader when record counts are unknown: the
    epoch's shard order dealt round-robin over all readers."""
    order = shard_order(num_shards, shuffle=shuffle, seed=seed, epoch=epoch)
    reader = rank * num_workers + worker
    return [int(s) for s in order[reader::world_size * num_workers]]
