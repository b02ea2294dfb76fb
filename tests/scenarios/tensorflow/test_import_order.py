"""tfrecord_torch and TensorFlow in one process, imported in either order, each
reading what the other writes.

Each order runs in a fresh interpreter, which imports TensorFlow unconditionally:
a missing TensorFlow fails these tests rather than skipping them. Two interpreters
importing TensorFlow and torch: slow tests (the warning for the wrong order is
checked fast in tests/journeys/test_errors_user.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]

_IMPORT_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    {imports}
    tf = tensorflow
    assert list(sys.modules).index("{first}") < list(sys.modules).index("{second}")

    ours = tfrecord_torch.make_example({{"i": [1, -2, 2**63 - 1], "f": [0.5], "b": [b"x", b""]}})
    message = tf.train.Example.FromString(ours)
    assert list(message.features.feature["i"].int64_list.value) == [1, -2, 2**63 - 1]
    assert list(message.features.feature["f"].float_list.value) == [0.5]
    assert list(message.features.feature["b"].bytes_list.value) == [b"x", b""]

    theirs = tf.train.Example(features=tf.train.Features(feature={{
        "i": tf.train.Feature(int64_list=tf.train.Int64List(value=[3, -4])),
        "b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\\xff"])),
    }})).SerializeToString()
    parsed = tfrecord_torch.parse_example(theirs)
    assert parsed["i"].tolist() == [3, -4] and parsed["b"] == [b"\\xff"]
    assert tfrecord_torch.make_example(parsed) == tf.train.Example.FromString(theirs).SerializeToString(
        deterministic=True)

    path = sys.argv[1]
    with tfrecord_torch.RecordWriter(path) as w:
        w.write(ours)
        w.write(theirs)
    assert [bytes(r) for r in tf.data.TFRecordDataset(path).as_numpy_iterator()] == [ours, theirs]
    with tf.io.TFRecordWriter(path + ".tf") as w:
        w.write(theirs)
    assert list(tfrecord_torch.read_records(path + ".tf")) == [theirs]
    print("ROUNDTRIP-OK")
""")


@pytest.mark.parametrize("first,second", [("tensorflow", "tfrecord_torch"),
                                          ("tfrecord_torch", "tensorflow")])
def test_import_order(tmp_path, first, second):
    code = _IMPORT_SCRIPT.format(imports=f"import {first}\nimport {second}", first=first, second=second)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.tfrecord")],
                            capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ROUNDTRIP-OK" in result.stdout
