"""The examples run as written (on small data).

The demo runs in the fast suite; the training examples (each a few interpreters importing
torch, most of them TensorFlow too) run with the slow scenarios, their paths covered fast by
the tests named beside each."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run(args, cwd, **kw):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow  # the demo's interpreter and its DataLoader workers: about 15 s of CPU
def test_demo(tmp_path):
    out = run([sys.executable, str(EXAMPLES / "demo.py"), str(tmp_path / "demo")], tmp_path)
    assert "tfrecord-torch verify" in out and "CORRUPT" not in out
    assert "DataLoader" in out


# fast: tests/unit/write/test_convert.py (TFDS and tf.data read the converter's output)
@pytest.mark.slow
def test_train_then_read_with_tensorflow(tmp_path):
    out = run([sys.executable, str(EXAMPLES / "train_cnn.py"), "--images", "300", "--out", "fake"], tmp_path)
    assert "epoch 0: 300 images" in out
    out = run([sys.executable, str(EXAMPLES / "read_with_tensorflow.py"), "fake"], tmp_path)
    assert "tf.data: 300 records" in out and "identical in TFDS and tfrecord_torch: True" in out


# fast: tests/scenarios/test_distributed.py::test_two_process_gloo_run (two ranks, disjoint shares)
@pytest.mark.slow
def test_torchrun_ddp(tmp_path):
    run([sys.executable, str(EXAMPLES / "torchrun_ddp.py"), "--prepare", "ddp"], tmp_path)
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    out = run([torchrun, "--nproc-per-node", "2", str(EXAMPLES / "torchrun_ddp.py"), "ddp"], tmp_path)
    assert "records per rank [300, 300]" in out


# fast: tests/unit/features/images/test_masks.py (TF's masks, v2 transforms, pad_collate)
@pytest.mark.slow
def test_train_segmentation_from_tensorflow_records(tmp_path):
    out = run([sys.executable, str(EXAMPLES / "train_segmentation.py"), "--out", "seg"], tmp_path)
    assert "masks (4, " in out and "step 1: loss" in out


# fast: tests/unit/features/images/test_masks.py (the OD preset against TF, boxes, detection_collate)
@pytest.mark.slow
def test_train_detector_from_tensorflow_records(tmp_path):
    out = run([sys.executable, str(EXAMPLES / "train_detector.py"), "--out", "det"], tmp_path)
    assert "boxes per image [1, 2, 3, 2]" in out and "step 1: loss" in out
