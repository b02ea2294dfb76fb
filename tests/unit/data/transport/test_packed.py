"""detection_collate's batches through one reused shared-memory segment
(data/transport/packed.py): the same types, attributes and values as in the
main process, every tensor of a batch over one segment, the segment written
again only once the receiver let go of the whole batch."""

import gc

import pytest
import torch
import torch.multiprocessing  # noqa: F401 - registers torch's reductions with ForkingPickler
import torch.utils.data
from helpers import count_fd_receipts, in_threads
from torch.utils.data import DataLoader
from torchvision import tv_tensors

from tfrecord_torch import TFRecordDataset, detection_collate, presets
from tfrecord_torch.data.transport.packed import PackedLists
from tfrecord_torch.data.transport.shipped import SLOTS, SharedBuffers
from tfrecord_torch.features.collate import detection_lists

from .test_byvalue import sample, send, write_od


@pytest.fixture(autouse=True)
def own_pool_and_mappings(monkeypatch):
    """This module's segments in a pool and a receiver's table of their own:
    the in-process sends here are this process's own segments, which no
    worker's exit would let go, and other tests count the table's entries."""
    from tfrecord_torch.data.transport import packed, shipped

    monkeypatch.setattr(packed, "_POOL", SharedBuffers())
    monkeypatch.setattr(shipped, "_MAPPED", shipped._Mapped())


def storages(images, targets):
    """The mappings of this process the tensors of a batch lie in (the
    shared-memory file's name for a segment; a heap or anonymous memory has
    none of the kind), each as (start, name)."""
    tensors = [*images, *(v for t in targets for v in t.values() if isinstance(v, torch.Tensor))]
    with open("/proc/self/maps") as f:
        maps = [line.split(maxsplit=5) for line in f]
    found = set()
    for tensor in tensors:
        ptr = tensor.data_ptr()
        for fields in maps:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= ptr < end or (tensor.nbytes == 0 and ptr == end):
                found.add((start, fields[5].strip() if len(fields) > 5 else ""))
                break
    return found


def one_segment(images, targets):
    """The start of the one shared-memory mapping every tensor of the batch lies in."""
    (found,) = storages(images, targets)
    start, name = found
    assert "torch" in name or "shm" in name or "memfd" in name, name
    return start


def assert_same_batch(got, want):
    images, targets = got
    for image, target, (image2, target2) in zip(images, targets, zip(*want)):
        assert type(image) is type(image2) and torch.equal(image, image2) and image.stride() == image2.stride()
        assert target.keys() == target2.keys()
        for key, value in target2.items():
            assert type(target[key]) is type(value), key
            if isinstance(value, torch.Tensor):
                assert target[key].dtype == value.dtype and torch.equal(target[key], value), key
            else:
                assert target[key] == value, key
        if "boxes" in target2:
            assert target["boxes"].canvas_size == target2["boxes"].canvas_size
            assert target["boxes"].format == target2["boxes"].format


def test_a_batch_arrives_over_one_segment_as_it_was(monkeypatch):
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())  # as in a worker
    batch = [sample(1), sample(0), sample(3)]
    packed = detection_collate(batch)
    assert isinstance(packed, PackedLists)
    want = detection_lists(batch)
    got = send(packed)
    assert type(got) is tuple and type(got[0]) is list and type(got[1]) is list
    assert_same_batch(got, want)
    assert type(got[1][1]["masks"]) is tv_tensors.Mask and got[1][1]["masks"].shape == (0, 8, 9)
    one_segment(*got)  # one segment, not a storage per tensor
    assert got[0][0].numpy().flags.writeable
    again = send(packed, shared_memory=False)  # sent twice: by value the second time
    assert_same_batch(again, want)


def test_edits_after_detection_collate_are_sent(monkeypatch):
    """The bytes are copied when the batch is pickled, not when it is made:
    a collate_fn that changes the tensors in place afterwards sends its values."""
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    packed = detection_collate([sample(1), sample(2)])
    packed[0][1].fill_(7)
    packed[1][0]["boxes"].mul_(2)
    got = send(packed)
    assert (got[0][1] == 7).all() and got[1][0]["boxes"].tolist() == [[2.0, 4.0, 10.0, 12.0]]


def test_a_segment_is_written_again_only_once_let_go(monkeypatch):
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    first = send(detection_collate([sample(2), sample(1)]))
    where = one_segment(*first)
    kept = send(detection_collate([sample(3), sample(3)]))
    assert one_segment(*kept) != where  # the first batch is held: another segment
    assert first[0][0].unique().tolist() == [2]
    image = first[0][0]
    del first
    gc.collect()
    third = send(detection_collate([sample(1)]))
    assert one_segment(*third) != where  # one tensor of the first batch still held
    assert image.unique().tolist() == [2]
    del image, third
    gc.collect()
    assert one_segment(*send(detection_collate([sample(2)]))) == where  # let go: written again
    assert_same_batch(kept, detection_lists([sample(3), sample(3)]))


def test_batches_packed_from_8_threads(monkeypatch):
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    errors = []

    def run():
        for k in range(1, 12):
            batch = [sample(k % 4), sample(k % 3)]
            got = send(detection_collate(batch))
            if [int(i[0, 0, 0]) for i in got[0]] != [k % 4, k % 3] or \
                    [len(t["labels"]) for t in got[1]] != [k % 4, k % 3]:
                errors.append(k)

    assert not in_threads(run, 8) and not errors


def test_worker_batches_share_reused_segments(tmp_path, monkeypatch):
    """2 persistent workers, 3 epochs: every batch equals the main process's
    and lies in one segment; the batches of the first epoch, kept to the end,
    are never written over; the main process receives a descriptor per
    segment, not per batch."""
    write_od(tmp_path / "od.tfrecord", n=24)
    ds = TFRecordDataset(tmp_path, features=presets.object_detection(masks=True))
    alone = {int(t[0]["labels"][0]): (i, t) for i, t in DataLoader(ds, batch_size=4, collate_fn=detection_collate)}
    loader = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True, collate_fn=detection_collate)
    it = iter(loader)
    receipts = count_fd_receipts(monkeypatch)
    kept, seen = [], []
    for epoch in range(3):
        for images, targets in it if epoch == 0 else loader:
            assert_same_batch((images, targets), alone[int(targets[0]["labels"][0])])
            seen.append(one_segment(images, targets))
            if epoch == 0:
                kept.append((images, targets))
    for batch in kept:
        assert_same_batch(batch, alone[int(batch[1][0]["labels"][0])])
    assert len(seen) == 18 and len(set(seen)) < 18  # segments used again
    assert len(receipts) <= 2 * 2 * SLOTS  # 2 workers: each segment once, with its flags
