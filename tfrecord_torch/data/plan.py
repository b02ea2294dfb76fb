"""Who reads what: pure functions of integers.

A *plan* says, for one reader (a DataLoader worker of one rank), which
records of which shards it reads in an epoch, in order. Over all
``world_size x num_workers`` readers, the plans cover every record exactly
once (or, with ``even="pad"`` / ``"drop"``, give every rank the same count).

With record counts known (indexed shards), the shards are laid end to end;
when shuffling, that sequence of (shard, record) pairs is permuted as a
whole (:func:`global_order`: a true permutation, or a block shuffle with
``block > 1``). The epoch's sequence is then cut into one contiguous range
per rank and then per worker; a block shuffle mixes records only inside
each reader's range, so blocks stay whole and one read fetches each. So any number of readers works with any number
of shards, including fewer shards than readers, and records of all shards
mix in every batch. Without counts (compressed shards), whole shards are
dealt round-robin.

Randomness comes only from ``np.random.default_rng([seed, epoch, ...])``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np

from tfrecord_torch.io.budget import ReadBudget

__all__ = ["EVEN_MODES", "BlockOrder", "RangePlanner", "Segment", "global_order", "mix_choices", "plan_records", "plan_shards", "ramp_cuts",
           "read_groups", "resolve_rank", "shards_in_order", "split_range"]

SHUFFLE_WINDOW = 256  # blocks whose records a block shuffle permutes together

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
                 shuffle: bool, seed: int, epoch: int, even: str | None = None, block: int = 1) -> list[Segment]:
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
    total = int(np.sum(counts))
    if total == 0:
        return []
    lo, hi = split_range(*rank_positions(total, rank, world_size, even), worker, num_workers)
    planner = RangePlanner(counts, shuffle=shuffle, seed=seed, epoch=epoch, block=block, scope=(lo, hi))
    return planner.segments(lo, hi)


def global_order(total: int, *, seed: int, epoch: int, block: int = 1,
                 window: int = SHUFFLE_WINDOW) -> np.ndarray:
    """The epoch's permutation of the global record numbers 0..total-1.

    ``block=1`` gives a true uniform permutation. With ``block > 1`` runs of
    ``block`` consecutive records are permuted as units, then the records of
    every ``window`` consecutive blocks are permuted together: reads cover
    whole blocks (fewer, longer reads), and mixing approaches a true
    permutation's as ``window`` grows (docs/guide/distributed.md: "Shuffling").
    This is the sequence of a single reader; several readers split the block
    sequence first and mix inside their own share (:class:`RangePlanner`).
    """
    if block <= 1 or total <= 1:
        return np.random.default_rng([seed, epoch, 2]).permutation(total).astype(np.int64)
    blocks = BlockOrder(total, seed=seed, epoch=epoch, block=block, window=window)
    return blocks.mixed(0, total)


class BlockOrder:
    """A block shuffle's two stages: the blocks permuted as units (``order``),
    and a random key per position that mixes the records of ``window``
    consecutive blocks. :meth:`mixed` applies the mix to a range of positions
    only, so a reader that owns that range reads whole blocks."""

    def __init__(self, total: int, *, seed: int, epoch: int, block: int, window: int = SHUFFLE_WINDOW) -> None:
        rng = np.random.default_rng([seed, epoch, 2])
        starts = rng.permutation(-(-total // block)).astype(np.int64) * block
        sizes = np.minimum(block, total - starts)
        firsts = np.repeat(np.cumsum(sizes) - sizes, sizes)
        self.order = np.repeat(starts, sizes) + (np.arange(total, dtype=np.int64) - firsts)
        self.keys = rng.random(total)
        self.total, self.span = total, block * window

    def mixed(self, lo: int, hi: int) -> np.ndarray:
        """The records of positions [lo, hi) of the block sequence (wrapping
        past the end), those of each window's positions permuted together."""
        positions = np.arange(lo, hi, dtype=np.int64)
        wrapped = positions % self.total if hi > self.total else positions
        return self.order[wrapped][np.lexsort((self.keys[wrapped], positions // self.span))]


def read_groups(lo: int, hi: int, size: int) -> list[tuple[int, int]]:
    """[lo, hi) cut at the multiples of ``size`` (read groups aligned on the
    epoch's sequence, so every reader groups a position alike)."""
    cuts = [lo, *range((lo // size + 1) * size, hi, size), hi]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if a < b]


def ramp_cuts(sizes: np.ndarray, budget: ReadBudget | None = None) -> list[int]:
    """Where to cut the first group an iterator reads (records of ``sizes``
    bytes, in reading order) into reads that grow as ``budget``'s
    :meth:`~tfrecord_torch.io.budget.ReadBudget.ramp` does (1 MiB, then each
    twice the one before, by default), at least one record each. The first
    records are in hand after a small read, not after the whole group's; the
    reads after it overlap their decoding. Cuts are record counts, ascending."""
    ends = np.cumsum(sizes)
    cuts: list[int] = []
    reach = 0
    for step in (ReadBudget() if budget is None else budget).ramp():
        reach += step
        cut = max(int(np.searchsorted(ends, reach, side="right")), cuts[-1] + 1 if cuts else 1)
        if cut >= len(ends):
            return cuts
        cuts.append(cut)
    raise AssertionError("unreachable: a ramp is endless")


class RangePlanner:
    """Maps positions of an epoch's record sequence to (shard, record) pairs.

    The sequence is the shards end to end, or, when shuffling, the epoch's
    :func:`global_order` of it; positions past the end wrap around (for padding).

    With a block shuffle, ``scope`` is the range of positions one reader
    owns (a rank's share in batch mode, a DataLoader worker's in record
    mode): the blocks are dealt before they are mixed, so each reader's
    positions hold whole blocks (at most two cut at its ends) and every
    record is still read exactly once over all readers. Positions outside
    the scope cannot be asked for then.

    ``remaining`` renumbers the sequence: position i is then the epoch's
    position ``remaining[i]`` (the positions an epoch resumed under another
    layout has left to read, :mod:`tfrecord_torch.data.elastic`); it needs
    the whole sequence in scope, so no block shuffle.
    """

    def __init__(self, counts, *, shuffle: bool, seed: int, epoch: int, block: int = 1,
                 scope: tuple[int, int] | None = None, remaining: np.ndarray | None = None) -> None:
        self.counts = np.asarray(counts, np.int64)
        self.ends = np.cumsum(self.counts)
        self.total = int(self.ends[-1]) if len(self.ends) else 0
        self.shuffle = shuffle
        self.order: np.ndarray | None = None
        self.scope = (0, self.total) if scope is None else scope
        if shuffle and block > 1 and self.total > 1:
            # the reader's share of the block sequence, mixed inside: whole blocks, one read each
            self.order = BlockOrder(self.total, seed=seed, epoch=epoch, block=block).mixed(*self.scope)
        elif shuffle:
            self.order = global_order(self.total, seed=seed, epoch=epoch)
            self.scope = (0, self.total)
        self.remaining = remaining
        if remaining is not None and len(self.order if self.order is not None else ()) not in (0, self.total):
            raise ValueError("a resumed sequence (remaining=) needs the whole epoch in scope: no block shuffle")

    def pairs(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(shards, records): int64 arrays for positions [lo, hi), in order."""
        if self.total == 0 or hi <= lo:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self.remaining is not None:
            positions = self.remaining[lo:hi]
            return self._located(positions if self.order is None else self.order[positions])
        first, last = self.scope
        if self.order is not None and len(self.order) == last - first and first <= lo and hi <= last:
            ids = self.order[lo - first:hi - first]
        else:
            positions = np.arange(lo, hi, dtype=np.int64) % self.total
            if self.order is not None and len(self.order) != self.total:
                raise ValueError(f"positions [{lo}, {hi}) are outside this planner's scope [{first}, {last})")
            ids = positions if self.order is None else self.order[positions]
        return self._located(ids)

    def _located(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shards, records) of global record numbers ``ids``."""
        shards = np.searchsorted(self.ends, ids, side="right").astype(np.int64)
        return shards, ids - (self.ends[shards] - self.counts[shards])

    def segments(self, lo: int, hi: int) -> list[Segment]:
        """Positions [lo, hi) as segments: runs of one shard, in order."""
        shards, records = self.pairs(lo, hi)
        if not len(shards):
            return []
        cuts = np.flatnonzero(np.diff(shards)) + 1
        return [Segment(int(s[0]), r) for s, r in zip(np.split(shards, cuts), np.split(records, cuts))]


def shards_in_order(planner: RangePlanner, spans: Iterable[tuple[int, int]], step: int = 1 << 16
                    ) -> Iterator[int]:
    """The shards that the positions ``spans`` (read in that order) read from,
    each once, in the order they are first read; lazily, ``step`` positions at
    a time, and done as soon as every shard has come."""
    seen: set[int] = set()
    for a, b in spans:
        for lo in range(a, b, step):
            shards, _ = planner.pairs(lo, min(lo + step, b))
            found, first = np.unique(shards, return_index=True)
            for shard in found[np.argsort(first)].tolist():
                if shard not in seen:
                    seen.add(shard)
                    yield shard
            if len(seen) == len(planner.counts):
                return


def plan_shards(num_shards: int, *, rank: int, world_size: int, worker: int, num_workers: int,
                shuffle: bool, seed: int, epoch: int, ranks_first: bool = False) -> list[int]:
    """Whole shards for one reader when record counts are unknown: the
    epoch's shard order dealt round-robin over all readers, a rank's
    DataLoader workers side by side; ``ranks_first``: every rank's worker 0
    first, then every rank's worker 1, ..., so no rank is left without a
    shard while there are as many shards as ranks."""
    order = shard_order(num_shards, shuffle=shuffle, seed=seed, epoch=epoch)
    reader = worker * world_size + rank if ranks_first else rank * num_workers + worker
    return [int(s) for s in order[reader::world_size * num_workers]]


def mix_choices(weights, *, seed: int, epoch: int, reader: int, block: int = 16) -> Iterator[int]:
    """Which dataset each step of a weighted mix reads, endlessly.

    Smooth weighted round-robin fixes how many steps of each ``block`` go to
    each dataset (after every block, dataset i has had ``weights[i] x steps``
    of them, within one), then the steps inside a block are permuted at random
    (``default_rng([seed, epoch, reader, 3])``). So the weights hold exactly,
    not only on average, for every reader (rank x DataLoader worker).
    """
    w = np.asarray(weights, np.float64)
    w = w / w.sum()
    current = np.zeros(len(w))
    rng = np.random.default_rng([seed, epoch, reader, 3])
    while True:
        picks = np.empty(block, np.int64)
        for j in range(block):
            current += w
            i = int(np.argmax(current))
            current[i] -= 1.0
            picks[j] = i
        yield from rng.permutation(picks).tolist()
