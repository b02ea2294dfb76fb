"""TensorFlow's own ``tf.data.TFRecordDataset`` tests
(tensorflow/python/data/kernel_tests/tf_record_dataset_test.py), transcribed: the same
files (two files of seven records "Record r of file f", written by
``tf.io.TFRecordWriter``), read by this library's ``TFRecordDataset`` with
``features=Payload()`` (records as bytes, as tf.data gives them), with
``tf.data.TFRecordDataset`` on the same files as the oracle. One test per TF method,
named after it; TF's checkpoint tests become resume tests (``state_dict`` /
``load_state_dict`` at every break point of an epoch).

How TF's spellings map to ours:

* ``.repeat(n)``: iterating the dataset ``n`` times (one epoch each);
* ``.batch(b)``: ``batch_size=b`` (a batch is a list of payloads);
* ``compression_type="ZLIB"/"GZIP"``: ``Source(compression="zlib"/"gzip")``;
* a dataset of file names: a list of paths or a glob pattern;
* ``num_parallel_reads=4``: a DataLoader with 2 workers (records of all files, each once
  per epoch, in another order).

Not applicable (TF machinery with no user-visible equivalent here):

* ``testReadWithBuffer`` and ``TFRecordDatasetCheckpointTest.testBufferSize``: TF's
  ``buffer_size`` sizes its read buffer; this library has no such knob (reads are sized
  by the index). ``testBufferSize``'s resume checks run in ``test_checkpoint_batch_size``.
* ``testName``: names the op in TF's graph.
"""

import gzip
import pathlib
import zlib

import pytest
import tensorflow as tf
from torch.utils.data import DataLoader

from tfrecord_torch import Payload, Source, TFRecordDataset

from .common import tf_read, tf_write

NUM_FILES, NUM_RECORDS = 2, 7


def record(f: int, r: int) -> bytes:
    return f"Record {r} of file {f}".encode()  # TFRecordTestBase._record


@pytest.fixture
def filenames(tmp_path):
    """TFRecordTestBase._createFiles: written by TensorFlow."""
    paths = []
    for f in range(NUM_FILES):
        path = tmp_path / f"tf_record.{f}.txt"
        tf_write(path, [record(f, r) for r in range(NUM_RECORDS)])
        paths.append(str(path))
    return paths


def everything(files=range(NUM_FILES)) -> list[bytes]:
    return [record(f, r) for f in files for r in range(NUM_RECORDS)]


def payloads(paths, **kwargs) -> TFRecordDataset:
    return TFRecordDataset(paths, features=Payload(), **kwargs)


def compress(filenames, kind: str, folder: pathlib.Path) -> list[str]:
    """Whole files compressed as TF's test compresses them (zlib.compress, GzipFile)."""
    out = []
    for i, name in enumerate(filenames):
        data = pathlib.Path(name).read_bytes()
        if kind == "zlib":
            path = folder / f"tfrecord_{i}.z"
            path.write_bytes(zlib.compress(data))
        else:
            path = folder / f"tfrecord_{i}.gz"
            with gzip.GzipFile(path, "wb") as f:
                f.write(data)
        out.append(str(path))
    return out


def test_constructor_errors_tensor_input():
    with pytest.raises(TypeError, match="paths"):
        TFRecordDataset([1, 2, 3], features=Payload())
    with pytest.raises(TypeError, match="paths"):
        TFRecordDataset(object(), features=Payload())


def test_read_one_epoch(filenames):
    assert list(payloads(filenames[0])) == everything([0])
    assert list(payloads(filenames[1])) == everything([1])
    got = list(payloads(filenames))
    assert got == everything()
    assert got == [r for name in filenames for r in tf_read(name)]  # the oracle reads the same


def test_read_ten_epochs(filenames):
    ds = payloads(filenames)
    assert [r for _ in range(10) for r in ds] == everything() * 10


def test_read_ten_epochs_of_batches(filenames):
    ds = payloads(filenames, batch_size=NUM_RECORDS)
    want = [[record(f, r) for r in range(NUM_RECORDS)] for f in range(NUM_FILES)]
    assert [batch for _ in range(10) for batch in ds] == want * 10


@pytest.mark.parametrize("kind", ["zlib", "gzip"])
def test_read_compressed_files(filenames, tmp_path, kind):  # testReadZlibFiles, testReadGzipFiles
    files = compress(filenames, kind, tmp_path)
    assert [r for name in files for r in tf_read(name, kind.upper())] == everything()  # TF agrees
    assert list(payloads(files, source=Source(compression=kind))) == everything()
    assert list(payloads(files)) == everything()  # "auto" tells them by their first bytes


def test_read_from_dataset_of_files(filenames, tmp_path):
    assert list(payloads(iter(filenames))) == everything()
    (tmp_path / "glob").mkdir()
    for f, name in enumerate(filenames):  # a glob skips .txt (label files): the same records, renamed
        (tmp_path / "glob" / f"tf_record.{f}.tfrecord").write_bytes(pathlib.Path(name).read_bytes())
    assert list(payloads(str(tmp_path / "glob" / "tf_record.*.tfrecord"))) == everything()
    assert list(payloads(tmp_path / "glob")) == everything()


def test_read_ten_epochs_from_dataset_of_files_in_parallel(filenames):
    loader = DataLoader(payloads(filenames), batch_size=None, num_workers=2)
    got = [r for _ in range(10) for r in loader]
    assert sorted(got) == sorted(everything() * 10)


def test_pathlib(filenames):
    assert list(payloads([pathlib.Path(filenames[0])])) == everything([0])


def _resumed_at_every_break(make, epochs: int) -> None:
    """TF's checkpoint verify_fn, as resume: for each break point of an epoch, a state
    saved there and loaded into a new dataset gives exactly the rest of the epoch; and
    several breaks in a row give the uninterrupted sequence."""
    whole = make()
    runs = [list(whole) for _ in range(epochs)]
    for epoch in range(epochs):
        want = runs[epoch]
        for k in range(len(want) + 1):
            ds = make()
            ds.set_epoch(epoch)
            it = iter(ds)
            head = [next(it) for _ in range(k)]
            state = ds.state_dict()
            resumed = make()
            resumed.load_state_dict(state)
            assert head + list(resumed) == want, (epoch, k)
        # multiple breaks: save, restore, read one more, save again ...
        ds, got = make(), []
        ds.set_epoch(epoch)
        while True:
            it = iter(ds)
            try:
                got.append(next(it))
            except StopIteration:
                break
            state = ds.state_dict()
            ds = make()
            ds.load_state_dict(state)
        assert got == want, epoch


@pytest.mark.parametrize("batch_size", [1, 5])
def test_checkpoint_batch_size(filenames, batch_size):
    _resumed_at_every_break(lambda: payloads(filenames, batch_size=batch_size, shuffle=True, seed=3), epochs=2)
    plain = payloads(filenames, batch_size=batch_size)
    assert [r for b in plain for r in b] == everything()


@pytest.mark.parametrize("kind", [None, "gzip", "zlib"])
def test_checkpoint_compression_types(filenames, tmp_path, kind):
    files = filenames if kind is None else compress(filenames, kind, tmp_path)
    _resumed_at_every_break(lambda: payloads(files, shuffle=True, seed=5), epochs=2)
    assert sorted(payloads(files, shuffle=True, seed=5)) == sorted(everything())


def test_tf_reads_what_the_adaptation_assumes(filenames):
    ds = tf.data.TFRecordDataset(filenames)
    assert [bytes(r.numpy()) for r in ds] == everything()
