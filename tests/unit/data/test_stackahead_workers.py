"""Per sample in DataLoader workers: each record's image decoded straight into
its slot of a shared-memory segment, which the worker's collate sends as the
batch (no stack copy), against the same DataLoader collating plain dicts."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
import torch
from helpers import png_bytes
from torch.utils.data import DataLoader, default_collate

from tfrecord_torch import Batching, Image, ImageBatching, Int64, RecordWriter, TFRecordDataset, make_example
from tfrecord_torch.data import collating

N = 100
SIZE = (160, 200)  # 96,000 bytes of planes: over PLACED_BYTES


def _write(path, bad=()):
    rng = np.random.default_rng(1)
    with RecordWriter(path) as w:
        for i in range(N):
            pixels = rng.integers(0, 255, (*SIZE, 3), dtype=np.uint8)
            w.write(make_example({"image": b"not a jpeg" if i in bad else png_bytes(pixels, "JPEG", quality=90),
                                  "label": i}))
    return str(path)


def _dataset(path, threads, **kwargs):
    return TFRecordDataset(path, features={"image": Image(), "label": Int64()},
                           batching=Batching(images=ImageBatching(threads=threads)), **kwargs)


def _plain(batch):
    """default_collate of the items as plain dicts: no slot is ever given (no collate of ours tells B)."""
    return default_collate([dict(item) for item in batch])


def _same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert torch.equal(a["label"], b["label"]) and torch.equal(a["image"], b["image"])


@pytest.fixture
def copied():
    """How many image batches the workers' collate copied (counted across the forked workers)."""
    count = multiprocessing.Value("i", 0)
    stack = collating._STACKER.stack

    def counting(key, values):
        out = stack(key, values)
        if key == "image" and out is not None:
            with count.get_lock():
                count.value += 1
        return out

    collating._STACKER.stack = counting  # an instance attribute: the forked workers inherit it
    try:
        yield count
    finally:
        del collating._STACKER.stack


@pytest.mark.parametrize("threads", [1, 2])
def test_a_worker_sends_the_batch_its_records_were_decoded_into(tmp_path, copied, threads):
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path, threads)
    want = list(DataLoader(ds, batch_size=10, num_workers=2, collate_fn=_plain))
    loader = DataLoader(ds, batch_size=10, num_workers=2, persistent_workers=True)
    for _ in range(2):
        got = list(loader)
        _same(got, want)
        assert all(type(b["image"]) is torch.Tensor and b["image"].is_contiguous() for b in got)
        del got
    if threads == 1:  # each record decoded as it is taken: only each worker's first batch of the
        # first epoch, collated before the batch size is known, is copied; the other 9 of its 10 are sent
        assert copied.value == 2
    else:  # records handed to the decode threads ahead of the first collate have no slot: each
        # worker's 5 batches of the first epoch are copied, those of the second sent as decoded
        assert copied.value == 2 * 5


def test_kept_batches_from_workers_are_never_written_over(tmp_path):
    path = _write(tmp_path / "a.tfrecord")
    ds = _dataset(path, 1)
    want = list(DataLoader(ds, batch_size=10, num_workers=2, collate_fn=_plain))
    loader = DataLoader(ds, batch_size=10, num_workers=2, persistent_workers=True)
    kept = []
    for epoch in range(4):
        for k, b in enumerate(loader):
            if (epoch + k) % 3 == 0:
                kept.append((k, b))
    for k, b in kept:  # after later epochs' batches were decoded into the segments let go
        assert torch.equal(b["image"], want[k]["image"]) and torch.equal(b["label"], want[k]["label"])
        b["image"].zero_()  # a batch written into by the user: no later batch sees it
    _same(list(loader), want)


def _images_by_label(path):
    return {int(item["label"]): item["image"] for item in _dataset(path, 1)}


def test_items_a_worker_sends_one_by_one_are_in_no_segment_it_writes_again(tmp_path):
    path = _write(tmp_path / "a.tfrecord")
    want = _images_by_label(path)
    ds = _dataset(path, 1, shuffle=True, seed=3)  # each epoch's records in another order
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    kept = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        kept.extend(loader)  # every item held while later epochs' decode
    assert len(kept) == 3 * N
    for item in kept:
        assert torch.equal(item["image"], want[int(item["label"])])


def test_batches_a_worker_sent_are_kept_across_shuffled_epochs(tmp_path):
    path = _write(tmp_path / "a.tfrecord")
    want = _images_by_label(path)
    ds = _dataset(path, 1, shuffle=True, seed=3)
    loader = DataLoader(ds, batch_size=10, num_workers=2, persistent_workers=True)
    kept = []
    for epoch in range(4):
        ds.set_epoch(epoch)
        kept.extend(b for k, b in enumerate(loader) if (epoch + k) % 2 == 0)
    for b in kept:  # after later epochs decoded other records into the segments let go
        assert torch.equal(b["image"], torch.stack([want[int(label)] for label in b["label"]]))


def test_a_skipped_record_in_a_worker_leaves_the_others_right(tmp_path, copied):
    path = _write(tmp_path / "a.tfrecord", bad=(23,))
    ds = _dataset(path, 1, on_error="skip")
    want = list(DataLoader(ds, batch_size=10, num_workers=2, collate_fn=_plain))
    assert sum(len(b["label"]) for b in want) == N - 1
    loader = DataLoader(ds, batch_size=10, num_workers=2, persistent_workers=True)
    for _ in range(2):
        _same(list(loader), want)
    assert copied.value < 2 * 2 * 5  # past the skip the slots line up again
