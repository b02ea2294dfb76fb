"""Fixtures of the data tests."""

import pytest
import torch

from tfrecord_torch.data.transport.shipped import SharedBuffers


@pytest.fixture
def counted(monkeypatch):
    """Reused and allocated segments, counted in the DataLoader's workers."""
    counts = torch.zeros(2, dtype=torch.int64).share_memory_()
    take = SharedBuffers.take

    def counting(self, *args, **kwargs):
        before = self.reused
        out = take(self, *args, **kwargs)
        counts[0 if self.reused > before else 1] += 1
        return out

    monkeypatch.setattr(SharedBuffers, "take", counting)
    return counts
