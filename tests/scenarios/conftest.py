"""Fixtures shared by the scenario tests."""

import collections

import pytest

from tfrecord_torch.io import shardcache


@pytest.fixture
def fills(monkeypatch) -> collections.Counter:
    """The shard-cache copies this process completes, by shard URL."""
    made: collections.Counter = collections.Counter()
    fill = shardcache._fill

    def counted(url, *args, **kwargs):
        done = fill(url, *args, **kwargs)
        if done:
            made[url] += 1
        return done

    monkeypatch.setattr(shardcache, "_fill", counted)
    return made
