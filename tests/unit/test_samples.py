"""The docs' sample data (tfrecord_torch/samples.py): the command writes what
the docs name, each sample's path matches what it writes, and a name that is
no sample is refused with the list. Every docs block reads these samples in
tests/journeys/test_doc_blocks.py."""

import glob
import subprocess
import sys

import pytest

from tfrecord_torch import TFRecordDataset, tfds_dataset
from tfrecord_torch.samples import SAMPLES, write_samples


def test_each_sample_writes_what_its_path_names(tmp_path):
    for n, sample in enumerate(SAMPLES):
        folder = tmp_path / str(n)
        assert write_samples(folder, [sample.path]) == [sample]
        assert glob.glob(str(folder / sample.path)), sample.path
    assert len(TFRecordDataset(str(tmp_path / "0" / "data/train-*.tfrecord"))) == 80
    assert len(tfds_dataset(tmp_path / str(len(SAMPLES) - 1) / "records" / "photos", "train")) == 12


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_the_command_writes_the_samples_it_is_asked_for(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tfrecord_torch.samples", str(tmp_path), "--only",
                           "data/train-*.tfrecord", "seq.tfrecord"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == [
        str(tmp_path / "data/train-*.tfrecord"), str(tmp_path / "seq.tfrecord")]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        "seq.tfrecord", "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]


def test_a_name_that_is_no_sample_is_refused_with_the_list(tmp_path):
    with pytest.raises(ValueError, match=r"no sample is named 'data/\*\.tfrecord'; the samples are "
                                         r"data/train-\*\.tfrecord, data/part-\*\.tfrecord, seq\.tfrecord"):
        write_samples(tmp_path, ["data/*.tfrecord"])
