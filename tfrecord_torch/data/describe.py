"""How a :class:`~tfrecord_torch.data.iterable.TFRecordDataset` names itself:
its ``repr``, and the reader named by the line an epoch with skipped records
logs."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch.utils.data

from tfrecord_torch.data.shards import describe_shards

__all__ = ["Shown", "dataset_repr", "reader_where"]


class Shown(NamedTuple):
    """The settings a dataset's ``repr`` and log lines show."""

    name: str  # the dataset's class name
    epoch: int
    rank: int
    world_size: int
    shuffle: bool
    seed: int
    batch_size: int | None


def dataset_repr(shown: Shown, paths: list[str], counts: list[int] | None, features: Any) -> str:
    """``Name(shards, records, features=..., ...)``; ``counts`` None: the
    shards are streamed; ``features``: what the spec shows
    (:meth:`~tfrecord_torch.data.recordspec.RecordSpec.shown`). Settings at
    their defaults are left out."""
    records = "streamed" if counts is None else f"{sum(counts):,} records"
    parts = [describe_shards(paths), records, f"features={features}"]
    if shown.shuffle:
        parts.append(f"shuffle=True, seed={shown.seed}, epoch={shown.epoch}")
    if shown.batch_size is not None:
        parts.append(f"batch_size={shown.batch_size}")
    if shown.world_size > 1:
        parts.append(f"rank={shown.rank}/{shown.world_size}")
    return f"{shown.name}({', '.join(parts)})"


def reader_where(shown: Shown, worker: int, workers: int) -> str:
    """This reader, for the line an epoch with skips logs."""
    parts = [f"rank {shown.rank} of {shown.world_size}"] if shown.world_size > 1 else []
    if workers > 1 or torch.utils.data.get_worker_info() is not None:
        parts.append(f"DataLoader worker {worker} of {workers}")
    return f"{shown.name} epoch {shown.epoch}" + (f" ({', '.join(parts)})" if parts else "")
