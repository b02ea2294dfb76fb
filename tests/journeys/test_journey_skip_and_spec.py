"""``on_error="skip"`` set for one bad JPEG, on a TF team's shards: the bad record is
skipped and each epoch ends with one summary line, but a mistake in the spec (a key
typo, a feature of the wrong kind, ``Image()`` on a text feature) raises what
``on_error="raise"`` raises, in per-sample, batch, streamed and map-style reading, with
and without DataLoader workers, instead of empty epochs.

TensorFlow writes the shards and is the oracle for the records that are read."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import tensorflow as tf
from torch.utils.data import DataLoader

from tfrecord_torch import (
    FeatureError,
    Float,
    Image,
    IndexedTFRecordDataset,
    Int64,
    Source,
    TFRecordDataset,
)

SHARDS, PER_SHARD = 3, 8
GOOD = {"image": Image(key="image/encoded"), "label": Int64(key="image/class/label")}
SLIPS = {
    "key typo": {"image": Image(key="image/encoded"), "label": Int64(key="image/class/lable")},
    "wrong kind": {"label": Float(key="image/class/label")},
    "image on text": {"image": Image(key="image/class/text")},
}
READERS = ["records", "batches", "streamed", "map-style"]


def write_shards(folder, bad=()):
    """TF team shards (tf.io.TFRecordWriter): a JPEG, a label 0, 1, ... and its text;
    the records numbered in ``bad`` hold bytes that are no JPEG."""
    rng = np.random.default_rng(0)
    for s in range(SHARDS):
        with tf.io.TFRecordWriter(str(folder / f"train-{s:05d}-of-{SHARDS:05d}")) as w:
            for i in range(s * PER_SHARD, (s + 1) * PER_SHARD):
                pixels = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
                jpeg = b"\xff\xd8 not a jpeg" if i in bad else tf.io.encode_jpeg(pixels).numpy()
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    "image/class/text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"class {i}".encode()])),
                })).SerializeToString())


def tf_labels(folder) -> list[int]:
    """The labels tf.data reads from the folder, in file order."""
    files = sorted(tf.io.gfile.glob(str(folder / "train-*")))
    description = {"image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    return [int(tf.io.parse_single_example(r, description)["image/class/label"])
            for r in tf.data.TFRecordDataset(files)]


def read(folder, reader, features, on_error, workers):
    """Every item a user's loop gets, read as the docs show each reader."""
    if reader == "map-style":
        ds = IndexedTFRecordDataset(folder, features=features, on_error=on_error)
        return [item for batch in DataLoader(ds, batch_size=4, num_workers=workers) for item in _items(batch)]
    ds = TFRecordDataset(folder, features=features, on_error=on_error, batch_size=4 if reader == "batches" else None,
                         source=Source(index=False) if reader == "streamed" else None)
    loader = DataLoader(ds, batch_size=None if reader == "batches" else 4, num_workers=workers)
    return [item for batch in loader for item in _items(batch)]


def _items(batch) -> list[dict]:
    n = len(next(iter(batch.values())))
    return [{k: v[i] for k, v in batch.items()} for i in range(n)]


def where(error: FeatureError) -> tuple:
    """What the error says, without the DataLoader worker's traceback."""
    reason = error.reason.split(" (raised in a DataLoader worker)")[0]
    return error.key, error.path, error.record, error.offset, re.sub(r" at 0x[0-9a-f]+", "", reason)


@pytest.mark.parametrize(("slip", "reader", "workers"),
                         [(slip, reader, 0) for slip in SLIPS for reader in READERS] +
                         [("key typo", reader, 2) for reader in READERS])
def test_a_spec_slip_raises_under_skip_as_under_raise(tmp_path, slip, reader, workers):
    write_shards(tmp_path)
    with pytest.raises(FeatureError) as raised:
        read(tmp_path, reader, SLIPS[slip], "raise", workers)
    with pytest.raises(FeatureError) as skipped:
        read(tmp_path, reader, SLIPS[slip], "skip", workers)
    assert where(skipped.value) == where(raised.value)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("reader", READERS)
def test_one_bad_jpeg_first_among_good_records_is_skipped(tmp_path, reader, workers):
    """The first record read is the bad one: it is skipped, not taken for a spec error."""
    write_shards(tmp_path, bad={0, 9})
    got = read(tmp_path, reader, GOOD, "skip", workers)
    want = [label for label in tf_labels(tmp_path) if label not in (0, 9)]
    labels = sorted(int(item["label"]) for item in got)
    if reader == "map-style":  # the next readable record stands in for a bad one
        assert sorted(set(labels)) == want and len(labels) == len(want) + 2
    else:
        assert labels == want


def test_a_key_some_records_lack_stays_a_skipped_record(tmp_path):
    """Records that lack a key, among records that hold it, are bad records: skipped."""
    folder = tmp_path
    with tf.io.TFRecordWriter(str(folder / "train-00000-of-00001")) as w:
        for i in range(20):
            feature = {} if i in (0, 1, 2, 7) else {"label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    ds = TFRecordDataset(folder, features={"label": Int64()}, on_error="skip")
    assert [int(x["label"]) for x in ds] == [i for i in range(20) if i not in (0, 1, 2, 7)]
    assert ds.errors()["total"] == 4


@pytest.mark.parametrize("reader", ["records", "batches", "streamed"])
def test_an_epoch_with_skips_ends_with_one_summary_line(tmp_path, caplog, reader):
    write_shards(tmp_path, bad={3, 17})
    ds = TFRecordDataset(tmp_path, features=GOOD, on_error="skip", batch_size=4 if reader == "batches" else None,
                         source=Source(index=False) if reader == "streamed" else None)
    for epoch in range(2):
        with caplog.at_level(logging.WARNING, logger="tfrecord_torch"):
            caplog.clear()
            list(ds)
        summaries = [r.getMessage() for r in caplog.records if "records read under" in r.getMessage()]
        assert summaries == [f"TFRecordDataset epoch {epoch}: skipped 2 of 24 records read under on_error='skip' "
                             "(2 feature 'image/encoded'); dataset.errors() counts them over all workers"]
