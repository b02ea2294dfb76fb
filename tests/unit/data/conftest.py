"""Fixtures of the data tests."""

import threading

import pytest
import torch
from torch.utils.data import get_worker_info

from tfrecord_torch.data.transport.shipped import SharedBuffers
from tfrecord_torch.data.transport.stacking import Stacker


@pytest.fixture
def counted(monkeypatch):
    """Reused and allocated segments, counted in the DataLoader's workers.

    Each worker counts in its own row (two processes adding to one shared
    element can lose an addition), under a lock for its threads; the rows'
    sum is returned as [reused, allocated]."""
    counts = _Summed(2)
    take = SharedBuffers.take

    def counting(self, *args, **kwargs):
        before = self.reused
        out = take(self, *args, **kwargs)
        counts.add(0 if self.reused > before else 1)
        return out

    monkeypatch.setattr(SharedBuffers, "take", counting)
    return counts


@pytest.fixture
def stacked_in_workers(monkeypatch):
    """The batches whose images (or masks) a worker's collate stacked
    (copied), counted in the DataLoader's workers; the others were decoded
    into their batch's segment and sent as it is."""
    counts = _Summed(1)
    stack = Stacker.stack

    def counting(self, key, values):
        if key in ("image", "mask"):
            counts.add(0)
        return stack(self, key, values)

    monkeypatch.setattr(Stacker, "stack", counting)
    return counts


@pytest.fixture
def made_or_sent(monkeypatch):
    """Batch tensors of a worker's batch memory, counted in the DataLoader's
    workers: [made in their segment (``BatchMemory.empty``), copied into one
    as the batch is sent (``BatchMemory.finish``)]."""
    counts = _Summed(2)
    empty = Stacker.empty

    def counting(self, key, shape, dtype):
        counts.add(0 if key[0] == "made" else 1)
        return empty(self, key, shape, dtype)

    monkeypatch.setattr(Stacker, "empty", counting)
    return counts


class _Summed:
    """Counts kept in the DataLoader's workers, summed over workers when read.

    Each worker counts in its own row of shared memory (two processes adding
    to one shared element can lose an addition), under a lock for its threads."""

    def __init__(self, columns):
        self._counts = torch.zeros(16, columns, dtype=torch.int64).share_memory_()
        self._lock = threading.Lock()

    def add(self, column):
        info = get_worker_info()
        with self._lock:
            self._counts[0 if info is None else info.id + 1, column] += 1

    def zero_(self):
        self._counts.zero_()

    def __int__(self):
        return int(self._counts.sum())

    def tolist(self):
        return self._counts.sum(0).tolist()

    def __getitem__(self, k):
        return self.tolist()[k]
