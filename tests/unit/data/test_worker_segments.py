"""Batches and items from DataLoader workers over shared-memory segments the
workers write again: what the main process holds is never written over,
checked with records shuffled anew each epoch (a segment written over with
the same records in the same order would look unchanged)."""

from __future__ import annotations

import numpy as np
import torch
from helpers import png_bytes
from torch.utils.data import DataLoader

from tfrecord_torch import Batching, Image, ImageBatching, Int64, RecordWriter, TFRecordDataset, make_example

N = 100
SIZE = (160, 200)  # 96,000 bytes of planes: sent over a segment


def _write(path):
    rng = np.random.default_rng(1)
    with RecordWriter(path) as w:
        for i in range(N):
            pixels = rng.integers(0, 255, (*SIZE, 3), dtype=np.uint8)
            w.write(make_example({"image": png_bytes(pixels, "JPEG", quality=90), "label": i}))
    return str(path)


def _dataset(path, **kwargs):
    return TFRecordDataset(path, features={"image": Image(), "label": Int64()},
                           batching=Batching(images=ImageBatching(threads=1)), **kwargs)


def _images_by_label(path):
    return {int(item["label"]): item["image"] for item in _dataset(path)}


def test_items_a_worker_sends_one_by_one_are_in_no_segment_it_writes_again(tmp_path):
    path = _write(tmp_path / "a.tfrecord")
    want = _images_by_label(path)
    ds = _dataset(path, shuffle=True, seed=3)  # each epoch's records in another order
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
    ds = _dataset(path, shuffle=True, seed=3)
    loader = DataLoader(ds, batch_size=10, num_workers=2, persistent_workers=True)
    kept = []
    for epoch in range(4):
        ds.set_epoch(epoch)
        kept.extend(b for k, b in enumerate(loader) if (epoch + k) % 2 == 0)
    for b in kept:  # after later epochs decoded other records into the segments let go
        assert torch.equal(b["image"], torch.stack([want[int(label)] for label in b["label"]]))
