"""Batch buffers a DataLoader worker uses again (data/transport/shipped.py): a
segment is written again only once the receiver has let go of the batch."""

import gc
import os
import pickle
import resource
import sys
import threading
import time
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
import torch.multiprocessing  # noqa: F401 - registers torch's reductions with ForkingPickler
from helpers import count_fd_receipts, in_threads, kill_a_worker_mid_epoch, png_bytes
from torch.utils.data import DataLoader

from tfrecord_torch import Batching, Image, ImageBatching, Int64, RecordWriter, TFRecordDataset, make_example
from tfrecord_torch.data.transport.shipped import SLOTS, SharedBuffers, Shipped, _shared
from tfrecord_torch.data.transport.spares import Spare, Spares, _claim

SPEC = {"image": Image(), "label": Int64()}


def send(tensor):
    """What a DataLoader worker's queue does to a batch, in this process."""
    return pickle.loads(ForkingPickler.dumps(tensor))


def taken(buffers, value, shape=(2, 5, 6, 3)):
    out, token = buffers.take(shape, np.uint8, zero=False)
    out.fill_(value)
    return buffers.ship(out.permute(0, 3, 1, 2), token), token


def test_a_segment_is_reused_only_after_the_receiver_lets_go():
    buffers = SharedBuffers(slots=2)
    batch, (segment, flags, slot) = taken(buffers, 7)
    assert isinstance(batch, Shipped) and batch.is_contiguous(memory_format=torch.channels_last)
    got = send(batch)
    assert type(got) is torch.Tensor and got.shape == (2, 3, 5, 6) and int(flags[slot]) == 1
    assert got.stride() == batch.stride() and bool((got == 7).all())
    del batch
    other, (segment2, *_) = taken(buffers, 9)  # the first is still held by the receiver
    assert segment2 is not segment
    assert bool((got == 7).all())
    del got
    gc.collect()
    send(other)  # a receipt clears the flags of the batches let go
    assert int(flags[slot]) == 0
    del other
    _, (segment3, *_) = taken(buffers, 1)
    assert segment3 is segment and buffers.reused == 1


def test_a_segment_is_free_again_the_moment_the_receiver_lets_go():
    """No later receipt is needed: the last view of the batch dropped, its
    segment's flag is clear and the worker takes the segment again."""
    buffers = SharedBuffers(slots=2)
    batch, (segment, flags, slot) = taken(buffers, 7)
    got = send(batch)
    del batch
    view = got[1:]
    del got
    assert int(flags[slot]) == 1  # a view of the batch is still alive
    del view
    assert int(flags[slot]) == 0
    _, (again, *_) = taken(buffers, 1)
    assert again is segment and buffers.reused == 1


def test_a_batch_sent_and_let_go_during_the_check_of_its_slot_is_not_reused(monkeypatch):
    """A worker's feeder thread sends a batch (setting its segment's flag)
    and then lets go of it; a check of that slot in between, by the thread
    that collates the next batch, must not find it free while the main
    process holds the batch."""
    buffers = SharedBuffers(slots=1)
    queued = [taken(buffers, 7)[0]]  # collated, waiting in the worker's queue
    received = []
    unheld = SharedBuffers._unheld

    def feeder_meanwhile(self, k):
        if queued:
            received.append(send(queued.pop()))  # sent, then let go by the feeder thread
        return unheld(self, k)

    monkeypatch.setattr(SharedBuffers, "_unheld", feeder_meanwhile)
    out, token = buffers.take((2, 5, 6, 3), np.uint8, zero=False)
    out.fill_(9)
    assert token is None  # the only segment is held by the main process: a fresh one
    assert bool((received[0] == 7).all())


def test_sent_twice_the_second_is_a_copy_and_views_are_plain():
    buffers = SharedBuffers(slots=2)
    batch, (segment, flags, slot) = taken(buffers, 3)
    first, second = send(batch), send(batch)
    segment.fill_(5)
    assert bool((first == 5).all()) and bool((second == 3).all())  # only the first shares the segment
    assert type(batch[0]) is torch.Tensor and type(batch + 1) is torch.Tensor
    view = send(batch[1:])  # a plain view: torch copies it into memory of its own
    segment.fill_(6)
    assert bool((view == 5).all())


def test_untracked_when_every_slot_is_held():
    buffers = SharedBuffers(slots=1)
    held = [send(taken(buffers, v)[0]) for v in (1, 2, 3)]
    assert [int(h[0, 0, 0, 0]) for h in held] == [1, 2, 3]
    assert buffers.allocated == 3 and buffers.reused == 0
    _, token = buffers.take((1, 2, 2, 3), np.uint8, zero=False)
    assert token is None  # the slot's segment is still held: a fresh one, not kept


def test_a_growing_pool_uses_a_longer_segment_again_for_a_shorter_batch():
    """grow=True: a batch of another shape takes a free segment of its dtype
    that is long enough; a longer one gets a new segment a quarter longer
    than asked. Each arrives with its own shape and values."""
    buffers = SharedBuffers(slots=2)
    first, token = buffers.take((2, 10, 4), np.uint8, zero=False, grow=True)
    assert first.shape == (2, 10, 4) and first.is_contiguous()
    first.fill_(3)
    got = send(buffers.ship(first, token))
    assert got.shape == (2, 10, 4) and bool((got == 3).all())
    del first, got
    gc.collect()
    shorter, token = buffers.take((2, 7, 4), np.uint8, zero=False, grow=True)
    assert (buffers.reused, buffers.allocated) == (1, 1) and shorter.shape == (2, 7, 4)
    shorter.fill_(5)
    got = send(buffers.ship(shorter, token))
    assert got.shape == (2, 7, 4) and bool((got == 5).all())
    del shorter, got
    gc.collect()
    longer, _ = buffers.take((2, 13, 4), np.uint8, zero=False, grow=True)  # 104 > the 100 the first holds
    assert (buffers.reused, buffers.allocated) == (1, 2) and longer.shape == (2, 13, 4)
    other, _ = buffers.take((2, 7, 4), np.float32, zero=False, grow=True)  # another dtype: its own segment
    assert other.dtype == torch.float32 and buffers.allocated == 3


def test_zero_fill_on_a_reused_segment():
    buffers = SharedBuffers(slots=1)
    batch, _ = taken(buffers, 200)
    del batch
    again, token = buffers.take((2, 5, 6, 3), np.uint8, zero=True)
    assert token is not None and buffers.reused == 1 and not again.any()


def test_eight_threads_never_see_a_batch_overwritten():
    buffers = SharedBuffers(slots=48)  # more than the 8 threads hold at once
    lock = threading.Lock()
    ids = iter(range(10_000))

    def work():
        held = []
        for _ in range(40):
            with lock:
                value = next(ids) % 250 + 1
            batch, _ = taken(buffers, value)
            got = send(batch)
            del batch
            held.append((got, value))
            time.sleep(0)
            if len(held) > 2:
                old, v = held.pop(0)
                assert bool((old == v).all()), "a held batch was overwritten"
        for got, v in held:
            assert bool((got == v).all())

    assert not in_threads(work)
    assert buffers.reused > 0


def _write(path, sizes, bad=()):
    rng = np.random.default_rng(0)
    with RecordWriter(path) as w:
        for i, (h, w_) in enumerate(sizes):
            data = b"not a jpeg" if i in bad else png_bytes(
                rng.integers(0, 255, (h, w_, 3), dtype=np.uint8), "JPEG", quality=90)
            w.write(make_example({"image": data, "label": i}))
    return path


def test_workers_reuse_segments_and_kept_batches_stay_intact(tmp_path, counted):
    path = _write(tmp_path / "a.tfrecord", [(24, 32)] * 160)
    ds = TFRecordDataset(path, features=SPEC, batch_size=4)
    alone = [b["image"].clone() for b in DataLoader(ds, batch_size=None, num_workers=0)]
    kept = []
    for k, b in enumerate(DataLoader(ds, batch_size=None, num_workers=2)):
        assert type(b["image"]) is torch.Tensor and torch.equal(b["image"], alone[k])
        if k % 5 == 0:
            kept.append((k, b["image"]))
    assert k == 39
    assert all(torch.equal(image, alone[k]) for k, image in kept)
    reused, allocated = counted.tolist()
    assert reused >= 10 and reused + allocated == 40  # segments went round; kept batches stayed intact


def test_padding_and_bad_images_on_reused_segments(tmp_path, counted):
    """Padded batches and failed slots read zeros, never a previous batch's pixels."""
    sizes = [(40, 48) if i % 3 else (16, 20) for i in range(96)]  # a period the batch of 4 does not share
    path = _write(tmp_path / "a.tfrecord", sizes, bad={5, 33, 70})
    options = ImageBatching(pad=True, size=(40, 48))
    ds = TFRecordDataset(path, features=SPEC, batch_size=4, on_error="skip",
                         batching=Batching(images=options))
    alone = [{k: v.clone() for k, v in b.items()} for b in DataLoader(ds, batch_size=None, num_workers=0)]
    assert len(alone) == 24
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    for _ in range(2):  # two epochs of the same workers
        for k, b in enumerate(loader):
            assert alone[k].keys() == b.keys() and all(torch.equal(alone[k][n], b[n]) for n in b)
        assert k == 23
    assert counted[0] >= 10


def test_a_plain_view_sent_first_moves_the_batch_and_it_is_sent_as_a_copy():
    """torch moves a storage into new shared memory when a plain view of it is
    sent; the batch no longer lies in the segment, so it is not sent as one."""
    buffers = SharedBuffers(slots=1)
    batch, (segment, flags, slot) = taken(buffers, 4)
    send(batch[:1])
    got = send(batch)
    assert int(flags[slot]) == 0 and bool((got == 4).all())
    segment.fill_(8)
    assert bool((got == 4).all())


def test_a_reused_segment_is_passed_to_the_main_process_once(tmp_path, monkeypatch):
    """Each batch of a worker arrives without a file descriptor once its
    segment (and the small tensors) have been sent: they travel by value or
    by reference to a segment the main process keeps mapped."""
    path = _write(tmp_path / "a.tfrecord", [(24, 32)] * 160)
    ds = TFRecordDataset(path, features=SPEC, batch_size=4)
    alone = [b["image"].clone() for b in DataLoader(ds, batch_size=None, num_workers=2)]
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    it = iter(loader)  # the workers start
    receipts = count_fd_receipts(monkeypatch)
    from tfrecord_torch.data.transport.shipped import _MAPPED

    slots = SLOTS + Batching().prefetch
    for epoch in range(3):
        labels = []
        for k, b in enumerate(it if epoch == 0 else loader):
            assert torch.equal(b["image"], alone[k])
            labels.extend(b["label"].tolist())
        assert labels == list(range(160))
        assert len(_MAPPED._segments) <= 2 * slots  # each epoch's segments replace the last one's
    assert 0 < len(receipts) <= 3 * 2 * 2 * slots  # a segment and the flags, per segment of a worker's epoch
    assert len(receipts) < 3 * 40  # not one a batch


# the DataLoader's own SIGCHLD handler may raise again while its iterator is collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_worker_killed_mid_epoch_fails_loudly_and_the_next_epoch_is_whole(tmp_path):
    path = _write(tmp_path / "a.tfrecord", [(24, 32)] * 160)
    ds = TFRecordDataset(path, features=SPEC, batch_size=4)
    alone = [b["image"].clone() for b in DataLoader(ds, batch_size=None, num_workers=0)]
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    it = iter(loader)
    first = [next(it) for _ in range(6)]
    kill_a_worker_mid_epoch(it)
    del it
    assert all(torch.equal(b["image"], alone[k]) for k, b in enumerate(first))
    again = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(again) == 40 and all(torch.equal(b["image"], alone[k]) for k, b in enumerate(again))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
def test_a_new_segment_comes_with_its_pages_in_and_reads_as_zeros():
    """Written page by page, a new segment traps once per 4 KiB page; its
    pages are brought in by one madvise when it is made."""
    buffers = SharedBuffers(slots=1)
    out, token = buffers.take((8 << 20,), np.uint8, zero=False)  # 2,048 pages
    assert token is not None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    out[: 4 << 20].fill_(7)  # written first: reading it would bring pages in too
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 128, f"{faults} page faults writing 4 MiB of a new segment"
    assert int(out.sum()) == 7 * (4 << 20)  # the rest reads as zeros


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
def test_a_spare_taken_up_comes_with_its_pages_mapped():
    """A worker forked after the main process mapped a segment does not have
    its pages in its own page tables: written page by page, the batch trapped
    once per 4 KiB (136-142k times a pass for three 151 MiB segments). Taken
    up, the spare's pages are mapped by one madvise."""
    spare = _shared(torch.empty(0, dtype=torch.uint8), (8 << 20,))  # 2,048 pages, in: the last worker wrote them
    spare.fill_(1)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            buffers = SharedBuffers(slots=1)
            with buffers._lock:
                buffers._flags_here()
                _, array = buffers._new_segment((8 << 20,), np.dtype(np.uint8), 0, spare)
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            array[: 4 << 20] = 7
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            os.write(w, f"{faults} {buffers.adopted} {int(array[4 << 20])}".encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode().split()
    os.close(r)
    os.waitpid(pid, 0)
    faults, adopted, untouched = map(int, got)
    assert adopted == 1 and untouched == 1  # taken up as it was, not made anew
    assert faults < 128, f"{faults} page faults writing 4 MiB of a spare taken up"
    assert bool((spare[: 4 << 20] == 7).all())  # the same memory as the main process's


@pytest.fixture
def made(monkeypatch):
    """Segments the DataLoader's workers made new and took up (spares), counted across processes."""
    counts = torch.zeros(2, dtype=torch.int64).share_memory_()
    new_segment = SharedBuffers._new_segment

    def counting(self, shape, dtype, slot, spare=None):
        counts[0 if spare is None else 1] += 1
        return new_segment(self, shape, dtype, slot, *([] if spare is None else [spare]))

    monkeypatch.setattr(SharedBuffers, "_new_segment", counting)
    return counts


def _a_pid_gone():
    """The pid of a child that has ended (and been waited for): a sender gone."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


@pytest.mark.parametrize("batch_mode", [False, True], ids=["per-sample", "batch-mode"])
def test_workers_forked_each_epoch_take_up_the_last_epochs_segments(tmp_path, made, batch_mode):
    """Workers that are not persistent are forked anew each epoch: they take up
    the segments the main process kept mapped from the last epoch's workers
    (whose pages are in) instead of making new ones, and never one a batch
    still held lies in. Before, each epoch made all its segments afresh."""
    path = _write(tmp_path / "a.tfrecord", [(96, 128)] * 160)  # a batch of 4 is sent over a segment
    ds = TFRecordDataset(path, features=SPEC, batch_size=4 if batch_mode else None)
    size = None if batch_mode else 4
    alone = {int(label): image.clone() for b in DataLoader(ds, batch_size=size, num_workers=0)
             for label, image in zip(b["label"], b["image"])}

    def intact(batch):
        return all(torch.equal(image, alone[int(label)]) for label, image in zip(batch["label"], batch["image"]))

    kept, per_epoch = [], []
    for epoch in range(4):
        before = made.tolist()
        for k, b in enumerate(DataLoader(ds, batch_size=size, num_workers=2)):
            assert intact(b), (epoch, k)
            if k in (3, 20):
                kept.append(b)  # held across the later epochs: their segments stay theirs
        assert k == 39
        per_epoch.append([a - b for a, b in zip(made.tolist(), before)])
    assert all(intact(b) for b in kept)
    # [new, taken up] per epoch, e.g. [[12, 0], [2, 10], [2, 10], [2, 10]]: the 2 new ones replace the
    # segments of the 2 batches kept (the first epoch may take up an earlier DataLoader's segments)
    later = per_epoch[1:]
    assert all(taken > 0 for _, taken in later) and sum(n for n, _ in later) < sum(t for _, t in later), per_epoch


def test_a_spare_is_taken_up_by_one_process_alone(tmp_path):
    """Spares seen by workers forked at once (two DataLoaders): one takes a
    segment up and holds it while it lives; the kernel lets go when it ends."""
    gone = _a_pid_gone()
    segment = _shared(torch.empty(0, dtype=torch.uint8), (1 << 16,))
    flags = _shared(torch.zeros(2, dtype=torch.int32))
    spare = Spare((gone, 0), segment, flags, 1)
    release_r, release_w = os.pipe()  # children hold until the parent closes it
    children = []
    for _ in range(8):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(release_w)
            got = _claim(spare) is not None
            os.write(w, b"1" if got else b"0")
            os.read(release_r, 1)  # held while it lives: until every child has tried
            os._exit(0)
        os.close(w)
        children.append((pid, r))
    os.close(release_r)
    results = []
    for _pid, r in children:
        results.append(os.read(r, 1))
        os.close(r)
    assert results.count(b"1") == 1, results
    assert _claim(spare) is None  # the taker still lives
    os.close(release_w)
    for pid, _ in children:
        os.waitpid(pid, 0)
    claim = _claim(spare)  # it ended: free again
    assert claim is not None
    os.close(claim)


def test_a_spare_is_not_taken_up_while_its_sender_lives_or_a_batch_over_it_is_held():
    segment = _shared(torch.empty(0, dtype=torch.uint8), (1 << 16,))
    flags = _shared(torch.zeros(2, dtype=torch.int32))
    assert _claim(Spare((os.getpid(), 0), segment, flags, 0)) is None  # its sender lives
    gone = _a_pid_gone()
    flags[1] = 1
    assert _claim(Spare((gone, 0), segment, flags, 1)) is None  # the main process holds a batch over it
    flags[1] = 0
    claim = _claim(Spare((gone, 0), segment, flags, 1))
    assert claim is not None
    os.close(claim)


def test_a_spare_is_taken_up_by_fit_and_not_when_far_longer(monkeypatch):
    """A worker takes up a spare of the batch's dtype at least as long and at
    most twice as long: a loader of small images leaves a loader of large
    ones' segments alone."""
    gone = _a_pid_gone()
    flags = _shared(torch.zeros(3, dtype=torch.int32))
    big = _shared(torch.empty(0, dtype=torch.uint8), (3000,))
    floats = _shared(torch.empty(0, dtype=torch.float32), (1500,))
    fit = _shared(torch.empty(0, dtype=torch.uint8), (1500,))
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())  # as in a worker
    spares = Spares()
    inherited = [Spare((gone, 0), big, flags, 0), Spare((gone, 1), floats, flags, 1), Spare((gone, 2), fit, flags, 2)]
    assert spares.take(inherited, np.dtype(np.uint8), 1000) is fit
    assert spares.take(inherited, np.dtype(np.uint8), 1000) is None
    spares.let_go(fit)


def test_persistent_workers_in_batch_mode_write_the_last_epochs_segments_again(tmp_path, made):
    """Each epoch of a persistent worker is a new iteration; its batches go
    into the segments the worker made in its first epoch. Before, each
    iteration had a pool of its own and made all its segments again: the
    kernel zeroed 6 x 36 MB each epoch of 500x375 photos."""
    path = _write(tmp_path / "a.tfrecord", [(96, 128)] * 160)
    ds = TFRecordDataset(path, features=SPEC, batch_size=4)
    alone = [b["image"].clone() for b in DataLoader(ds, batch_size=None, num_workers=0)]
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    per_epoch = []
    for _ in range(4):
        before = made.tolist()
        seen = 0
        for b in loader:  # each batch let go before the next: its segment is free again
            assert torch.equal(b["image"], alone[int(b["label"][0]) // 4])
            seen += 1
        assert seen == 40
        per_epoch.append(sum(made.tolist()) - sum(before))  # made or taken up (an earlier test's)
    # before: [10, 10, 10, 10]. Under load a worker may find every segment held when it starts a
    # batch and make one more in a later epoch
    assert per_epoch[0] > 0 and sum(per_epoch[1:]) <= 2, per_epoch


@pytest.mark.parametrize("move", [
    lambda got: got.share_memory_(),
    lambda got: send(got),  # sent on to another process: torch moves it into shared memory of its own
], ids=["share_memory_", "sent-on"])
def test_arrays_of_a_batch_torch_moved_into_shared_memory_stay_as_they_were(move):
    """A batch a worker sent arrives over its segment, not in shared memory
    of torch's own, so ``share_memory_()`` or sending it on moves it into a
    new segment; the NumPy arrays and DLPack views taken of it before still
    point at the worker's segment, which is not written again while the
    batch (its tensors, wherever their memory now is) is alive."""
    buffers = SharedBuffers(slots=1)
    batch, (segment, flags, slot) = taken(buffers, 7)
    got = send(batch)
    del batch
    array, capsule = got.numpy(), np.from_dlpack(got[1])
    move(got)
    assert got.is_shared() and bool((got == 7).all())
    assert int(flags[slot]) == 1  # still held: the arrays point into the segment
    again, token = taken(buffers, 9)
    assert token is None or token[0] is not segment
    assert (array == 7).all() and (capsule == 7).all()
    del got, again
    gc.collect()
    assert (array == 7).all() and int(flags[slot]) == 1  # the array holds the tensor it came from
    del array, capsule
    gc.collect()
    assert int(flags[slot]) == 0


def test_a_worker_batch_moved_into_shared_memory_keeps_the_users_arrays(tmp_path):
    """User-style: each batch's NumPy view kept, the batch moved into shared
    memory (as a hogwild or queue user does); every kept view still holds
    its batch's pixels after the epoch."""
    path = _write(tmp_path / "a.tfrecord", [(24, 32)] * 64)
    ds = TFRecordDataset(path, features=SPEC, batch_size=4)
    alone = [b["image"].clone() for b in DataLoader(ds, batch_size=None, num_workers=0)]
    kept = []
    for b in DataLoader(ds, batch_size=None, num_workers=1):
        kept.append(b["image"].numpy())
        b["image"].share_memory_()
    assert len(kept) == len(alone)
    assert [k for k, array in enumerate(kept) if not np.array_equal(array, alone[k].numpy())] == []
