"""Batches and items from DataLoader workers over shared-memory segments the
workers write again: what the main process holds is never written over,
checked with records shuffled anew each epoch (a segment written over with
the same records in the same order would look unchanged). A worker decodes
its images straight into the segment their batch is sent in, where nothing
but that batch leaves the worker."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import png_bytes
from torch.utils.data import DataLoader, default_collate

from tfrecord_torch import (
    Batching,
    Float,
    Image,
    ImageBatching,
    Int64,
    Mask,
    RawTensor,
    RecordWriter,
    SerializedTensor,
    TFRecordDataset,
    make_example,
    serialize_tensor,
)
from tfrecord_torch.data import stackahead

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


@pytest.mark.parametrize("threads", [1, 2])
def test_a_workers_images_are_decoded_into_the_segment_their_batch_is_sent_in(tmp_path, stacked_in_workers,
                                                                              monkeypatch, threads):
    """In a worker with one core, each image is decoded into its slot of its
    batch's shared memory, and the batch is sent as that segment: nothing is
    copied to collate it. Workers forked for the next pass know the batch
    size the last pass's workers told, so their first batches come that way
    too. A worker with decode threads stacks its batches in its collate, as
    before (its threads hold records ahead: a segment per batch ahead)."""
    monkeypatch.setattr(stackahead, "_LAST_SIZE", stackahead._LastSize())  # this test's own: no size known yet
    path = _write(tmp_path / "a.tfrecord")
    want = _images_by_label(path)
    ds = TFRecordDataset(path, features={"image": Image(), "label": Int64()},
                         batching=Batching(images=ImageBatching(threads=threads)))
    for epoch in range(2):
        stacked_in_workers.zero_()
        got = list(DataLoader(ds, batch_size=10, num_workers=2))  # workers forked for each pass
        assert sorted(torch.cat([b["label"] for b in got]).tolist()) == list(range(N))
        for b in got:
            assert type(b["image"]) is torch.Tensor and b["image"].is_contiguous()
            assert torch.equal(b["image"], torch.stack([want[int(label)] for label in b["label"]]))
        if epoch == 1:  # (the first pass stacked what a worker took before its first collate told the size)
            assert int(stacked_in_workers) == (0 if threads == 1 else N // 10)


def test_items_that_leave_a_worker_by_themselves_are_never_written_over(tmp_path, monkeypatch, counted):
    """Items sent one by one (batch_size=None), or kept by a collate_fn of
    one's own, leave the worker in memory of their own: what the main
    process holds of them is never written over by later epochs, though
    their slots' segments are written again. With a batch size known from
    before, items sent one by one take slots for a batch's worth of items
    only (no collate tells the size): a slab a worker, and the one the next
    item opens."""
    monkeypatch.setattr(stackahead, "_LAST_SIZE", stackahead._LastSize())
    stackahead._LAST_SIZE.set(10)  # a guess from an earlier loader: the first items would get slots
    path = _write(tmp_path / "a.tfrecord")
    want = _images_by_label(path)
    ds = _dataset(path, shuffle=True, seed=3)  # each epoch's records in another order
    alone = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    with_items = DataLoader(ds, batch_size=10, num_workers=2, persistent_workers=True,
                            collate_fn=lambda items: (default_collate(items), items))
    kept = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        kept.extend(alone)
        if epoch == 0:
            assert sum(counted.tolist()) <= 2 * 2
        kept.extend(item for _, items in with_items for item in items)  # the batches let go, the items kept
    assert len(kept) == 2 * 3 * N
    for item in kept:  # after later epochs decoded other records into the workers' segments
        assert torch.equal(item["image"], want[int(item["label"])])


def test_two_large_keys_of_a_worker_go_into_their_segments_and_stay_as_sent(tmp_path, stacked_in_workers,
                                                                             monkeypatch):
    """An image and a mask a record (two segments a batch): the batches kept
    across shuffled epochs of persistent workers stay as they were sent, and
    after the first epoch none is copied in the worker's collate."""
    monkeypatch.setattr(stackahead, "_LAST_SIZE", stackahead._LastSize())
    rng = np.random.default_rng(2)
    path = str(tmp_path / "masks.tfrecord")
    with RecordWriter(path) as w:
        for i in range(N):
            pixels = rng.integers(0, 255, (*SIZE, 3), dtype=np.uint8)
            mask = (rng.integers(0, 4, (SIZE[0] * 2, SIZE[1] * 2, 1), dtype=np.uint8) * 60)
            w.write(make_example({"image": png_bytes(pixels, "JPEG", quality=90),
                                  "mask": png_bytes(mask[..., 0], "PNG"), "label": i}))
    features = {"image": Image(), "mask": Mask(), "label": Int64()}
    want = {int(item["label"]): item for item in TFRecordDataset(path, features=features)}
    ds = TFRecordDataset(path, features=features, shuffle=True, seed=5,
                         batching=Batching(images=ImageBatching(threads=1)))
    loader = DataLoader(ds, batch_size=10, num_workers=2, persistent_workers=True)
    kept = []
    for epoch in range(4):
        ds.set_epoch(epoch)
        stacked_in_workers.zero_()
        kept.extend(b for k, b in enumerate(loader) if (epoch + k) % 2 == 0)
        if epoch > 0:
            assert int(stacked_in_workers) == 0
    for b in kept:
        for key in ("image", "mask"):
            assert torch.equal(b[key], torch.stack([want[int(label)][key] for label in b["label"]]))


def test_batch_modes_raw_arrays_travel_in_reused_segments_and_stay_as_sent(tmp_path, counted):
    """Batch mode's column of fixed-shape RawTensor values (100 KB a record)
    is made in a segment the worker writes again, not one new segment a
    batch passed by file descriptor: batches kept across shuffled epochs of
    persistent workers stay as they were sent."""
    path = str(tmp_path / "raw.tfrecord")
    with RecordWriter(path) as w:
        for i in range(N):
            w.write(make_example({"x": np.full(100_000, i, np.uint8).tobytes(), "label": i}))
    ds = TFRecordDataset(path, features={"x": RawTensor(shape=(100, 1000)), "label": Int64()}, batch_size=5,
                         shuffle=True, seed=7)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)

    def right(b):
        return b["x"].shape == (5, 100, 1000) and \
            torch.equal(b["x"], b["label"].to(torch.uint8).view(5, 1, 1).expand(5, 100, 1000))

    for epoch in range(2):  # each batch let go: its segment is written again
        ds.set_epoch(epoch)
        assert all(right(b) for b in loader)
    reused, allocated = counted.tolist()
    assert reused + allocated == 2 * N // 5  # every batch's column made in a worker's segment
    assert allocated <= 2 * 6
    kept = []
    for epoch in range(2, 5):
        ds.set_epoch(epoch)
        kept.extend(b for k, b in enumerate(loader) if (epoch + k) % 2 == 0)
    assert len(kept) >= N // 5 and all(map(right, kept))  # after later epochs wrote the segments let go


def test_batch_modes_number_columns_travel_in_reused_segments_and_stay_as_sent(tmp_path, counted):
    """Batch mode's column of a fixed-shape Float ([B, 32] float32, 128 KiB a
    batch of 1,024) leaves a worker in a reused segment, not a new segment a
    batch passed by file descriptor; a batch transform's non-contiguous
    result is sent as torch sends it. Kept batches stay as sent."""
    path = str(tmp_path / "small.tfrecord")
    with RecordWriter(path) as w:
        for i in range(8192):
            w.write(make_example({"x": [float(i)] * 32, "label": i}))
    spec = {"x": Float(shape=(32,)), "label": Int64()}

    def right(b):
        return torch.equal(b["x"], b["label"].to(torch.float32)[:, None].expand(-1, 32))

    ds = TFRecordDataset(path, features=spec, batch_size=1024, shuffle=True, seed=1)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        ds.set_epoch(epoch)
        assert all(right(b) for b in loader)
    reused, allocated = counted.tolist()
    assert reused + allocated == 2 * 8 and allocated <= 2 * 6
    kept = []
    for epoch in range(2, 5):
        ds.set_epoch(epoch)
        kept.extend(b for k, b in enumerate(loader) if (epoch + k) % 2 == 0)
    assert len(kept) >= 8 and all(map(right, kept))
    transposed = TFRecordDataset(path, features=spec, batch_size=1024,
                                 transform=lambda b: {**b, "x": b["x"].t()})
    for b in DataLoader(transposed, batch_size=None, num_workers=2):
        assert b["x"].shape == (32, len(b["label"])) and torch.equal(b["x"].t(), b["label"].to(torch.float32)[:, None]
                                                                     .expand(-1, 32))


def test_batch_modes_lists_of_tensors_leave_a_worker_by_value(tmp_path, monkeypatch):
    """Batch mode gives values of varying length as a list of B tensors; a
    worker sends them inside the message, not each in a new segment whose
    descriptor the main process fetches in a socket round trip (64 a batch:
    2,539 records/s with 2 workers against 122k without, a probe of 2,048
    records)."""
    from multiprocessing import resource_sharer

    fetched = []  # descriptors the main process fetched from a worker (a worker never calls it)
    detach = resource_sharer.DupFd.detach
    monkeypatch.setattr(resource_sharer.DupFd, "detach", lambda self: fetched.append(1) or detach(self))
    path = str(tmp_path / "varlen.tfrecord")
    with RecordWriter(path) as w:
        for i in range(256):
            w.write(make_example({"ids": list(range(i % 7 + 1)), "raw": bytes([i % 256]) * (i % 5 + 1), "label": i}))
    ds = TFRecordDataset(path, features={"ids": Int64(shape=None), "raw": RawTensor(shape=(-1,)), "label": Int64()},
                         batch_size=64)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(batches) == 4 and fetched == []
    for b in batches:
        assert isinstance(b["ids"], list) and len(b["ids"]) == 64
        for label, ids, raw in zip(b["label"].tolist(), b["ids"], b["raw"]):
            assert type(ids) is torch.Tensor and ids.tolist() == list(range(label % 7 + 1))
            assert raw.tolist() == [label % 256] * (label % 5 + 1)


def test_batch_modes_serialized_tensors_are_stacked_in_their_segment(tmp_path, made_or_sent):
    """A column of serialized tensors of a fixed shape is stacked straight
    into the segment its batch is sent in, not stacked and then copied there."""
    path = str(tmp_path / "tensors.tfrecord")
    with RecordWriter(path) as w:
        for i in range(256):
            w.write(make_example({"t": serialize_tensor(torch.full((100, 100), float(i))), "label": i}))
    ds = TFRecordDataset(path, features={"t": SerializedTensor(dtype="float32", shape=(100, 100)), "label": Int64()},
                         batch_size=64)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert made_or_sent.tolist() == [4, 0]
    for b in batches:
        assert torch.equal(b["t"], b["label"].to(torch.float32).view(-1, 1, 1).expand(-1, 100, 100))
