"""Index files over TensorFlow-written record files: offsets and sizes, random
access with IndexedReader, and compressed files refused.

TensorFlow is imported unconditionally: the test environment always has it, and
a missing TensorFlow must fail loudly rather than skip these tests.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np
import pytest
import tensorflow as tf

from tfrecord_torch import IndexedReader, TFRecordError, build_index, load_index

from .common import BIG, OVERHEAD, PAYLOADS, header_offsets, tf_read, tf_write


def test_index_of_tf_written_file(tmp_path):
    path = tmp_path / "data.tfrecord"
    tf_write(path, PAYLOADS)
    expected = tf_read(path)

    index_path = build_index(path)
    assert index_path == str(path) + ".index"
    want_lines = "".join(f"{o} {len(p) + OVERHEAD}\n" for o, p in zip(header_offsets(PAYLOADS), PAYLOADS))
    assert Path(index_path).read_text() == want_lines

    index = load_index(index_path)
    assert index.dtype == np.int64 and index.shape == (len(PAYLOADS), 2)
    assert int(index[-1, 0] + index[-1, 1]) == path.stat().st_size

    with IndexedReader(path, index=index_path) as reader:
        assert len(reader) == len(expected)
        assert [reader[i] for i in range(len(reader))] == expected
        assert reader[-1] == expected[-1]
        assert reader[BIG] == expected[BIG]
        # Random order too.
        order = np.random.default_rng(0).permutation(len(expected)).tolist()
        assert [reader[i] for i in order] == [expected[i] for i in order]
        with pytest.raises(IndexError):
            reader[len(expected)]

    # The default index beside the file, an in-memory array, and a fresh scan agree.
    for kwargs in ({}, {"index": index}):
        with IndexedReader(path, **kwargs) as reader:
            assert [reader[i] for i in range(len(reader))] == expected
    os.unlink(index_path)
    with IndexedReader(path) as reader:
        assert [reader[i] for i in range(len(reader))] == expected


def test_index_explicit_path_and_empty_tf_file(tmp_path):
    path = tmp_path / "empty.tfrecord"
    with tf.io.TFRecordWriter(str(path)):
        pass
    index_path = tmp_path / "elsewhere.idx"
    assert build_index(path, index_path) == str(index_path)
    assert index_path.read_text() == ""
    assert load_index(index_path).shape == (0, 2)
    assert len(IndexedReader(path, index=index_path)) == 0


@pytest.mark.parametrize("options", ["GZIP", "ZLIB"])
def test_index_refuses_tf_compressed_file(tmp_path, options):
    path = tmp_path / "data.tfrecord"
    tf_write(path, [b"a", b"b"], options)
    with pytest.raises(TFRecordError, match="compressed"):
        build_index(path)
    assert not os.path.exists(str(path) + ".index")
