"""A small shard shared by the index and IndexedReader tests."""

import pytest

from tfrecord_torch import RecordWriter


def write(path, payloads, compression=None):
    with RecordWriter(path, compression=compression) as w:
        for p in payloads:
            w.write(p)
    return path


@pytest.fixture
def shard(tmp_path):
    payloads = [bytes([i % 256]) * (i * 7 % 50) for i in range(200)]
    return write(tmp_path / "s.tfrecord", payloads), payloads
