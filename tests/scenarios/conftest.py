"""Fixtures shared by the scenario tests."""

import collections
import sys

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


@pytest.fixture(autouse=True)
def fresh_filesystems():
    """Each test starts with no fsspec filesystem object cached by an earlier one (nor its listings),
    and keeps one per set of options, as fsspec does by default."""
    if "s3fs" in sys.modules:
        sys.modules["s3fs"].S3FileSystem.clear_instance_cache()
    yield
    if "s3fs" in sys.modules:
        sys.modules["s3fs"].S3FileSystem.clear_instance_cache()
