"""What one iteration of :class:`~tfrecord_torch.data.iterable.TFRecordDataset`
reads, handed by the dataset to the reader of its mode (record mode,
:mod:`~tfrecord_torch.data.recordmode`; batch mode,
:mod:`~tfrecord_torch.data.batchmode`; streamed shards,
:mod:`~tfrecord_torch.data.streamed`) as frozen values, so that each reader
takes a few named values instead of the dataset's attributes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch.utils.data

from tfrecord_torch.data.plan import RangePlanner
from tfrecord_torch.data.session import RemoteShards

__all__ = ["Reader", "ShardReads", "Share", "batch_count", "this_reader"]


@dataclass(frozen=True)
class ShardReads:
    """The shards an iteration reads, and how their bytes are reached.

    Attributes:
        paths: the shards.
        indexes: each shard's index (None where streamed).
        remote: how the dataset reaches its remote shards (the shard
            cache's copies or the listing's check).
        verify: check record CRCs.
        shuffle: the epoch's sequence is shuffled (reads gather from many
            shards at once).
    """

    paths: list[str]
    indexes: list[Any]
    remote: RemoteShards
    verify: bool
    shuffle: bool


class Share(NamedTuple):
    """A reader's part of the epoch: positions [lo, hi) of ``plan``."""

    plan: RangePlanner
    lo: int
    hi: int


class Reader(NamedTuple):
    """Who reads: DataLoader worker ``worker`` of ``workers`` (0 of 1 outside
    one), resuming after ``skip`` units of its own."""

    worker: int
    workers: int
    skip: int


def this_reader() -> list[int]:
    """[worker, workers]: this DataLoader worker, or [0, 1] outside one."""
    info = torch.utils.data.get_worker_info()
    return [0, 1] if info is None else [info.id, info.num_workers]


def batch_count(records: int, size: int, drop_last: bool) -> int:
    """Batches of ``size`` that ``records`` make (a short last one dropped with ``drop_last``)."""
    return records // size if drop_last else -(-records // size)
