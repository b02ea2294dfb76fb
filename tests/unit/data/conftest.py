"""Fixtures of the data tests."""

import threading

import pytest
import torch
from torch.utils.data import get_worker_info

from tfrecord_torch.data.transport.shipped import SharedBuffers


@pytest.fixture
def counted(monkeypatch):
    """Reused and allocated segments, counted in the DataLoader's workers.

    Each worker counts in its own row (two processes adding to one shared
    element can lose an addition), under a lock for its threads; the rows'
    sum is returned as [reused, allocated]."""
    counts = torch.zeros(16, 2, dtype=torch.int64).share_memory_()
    take = SharedBuffers.take
    lock = threading.Lock()

    def counting(self, *args, **kwargs):
        before = self.reused
        out = take(self, *args, **kwargs)
        info = get_worker_info()
        with lock:
            counts[0 if info is None else info.id + 1, 0 if self.reused > before else 1] += 1
        return out

    monkeypatch.setattr(SharedBuffers, "take", counting)
    return _Summed(counts)


class _Summed:
    """The per-worker counts, summed over workers when read."""

    def __init__(self, counts):
        self._counts = counts

    def tolist(self):
        return self._counts.sum(0).tolist()

    def __getitem__(self, k):
        return self.tolist()[k]
