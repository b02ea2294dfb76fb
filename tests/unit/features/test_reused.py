"""Memory used again once nothing refers to it (features/reused.py): never
while an array, view or tensor made from it lives; RawTensor's frames and
pad_collate's batches in the main process fault no new pages in, pass after pass."""

import gc
import multiprocessing
import resource

import numpy as np
import pytest
import torch
from helpers import in_threads

from tfrecord_torch import RawTensor, RecordWriter, TFRecordDataset, make_sequence_example, pad_collate
from tfrecord_torch.features.reused import Reused


def address(array):
    return array.__array_interface__["data"][0]


@pytest.mark.parametrize("nbytes", [1000, 3 << 20])  # carved from a slab; a buffer of its own
def test_memory_is_used_again_only_once_let_go(nbytes):
    pool = Reused(slab=4096 if nbytes < 4096 else 8 << 20, keep=1)
    first = pool.take(nbytes)
    first[:] = 1
    start = address(first)
    view = torch.from_numpy(first[10:])
    del first
    for _ in range(12):  # several slabs' worth: none of it over the memory the view holds
        pool.take(nbytes)[:] = 2
    assert view.eq(1).all()
    del view
    gc.collect()
    assert start in {address(pool.take(nbytes)) for _ in range(4)}  # let go: used again


def test_arrays_over_largest_are_not_kept():
    pool = Reused(slab=1 << 20, keep=2, largest=2 << 20)
    pool.take(3 << 20)
    assert not pool._large


def test_taken_from_8_threads_no_two_overlap():
    pool = Reused(slab=1 << 16, keep=2)
    errors = []

    def run():
        import threading

        mark = threading.get_ident() % 251
        for k in range(200):
            held = [pool.take(100 + 37 * (k % 7)), pool.take(20000 + k)]
            for array in held:
                array[:] = mark
            if any((array != mark).any() for array in held):
                errors.append(k)

    assert not in_threads(run, 8) and not errors


def _child_pools(pool, queue):
    queue.put((len(pool._slabs), pool._current is None, pool._lock.acquire(timeout=1)))


def test_a_forked_child_starts_empty():
    pool = Reused()
    pool.take(100)
    with pool._lock:  # held in the parent at the fork: the child's own lock is free
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_child_pools, args=(pool, queue))
        child.start()
    assert queue.get(timeout=30) == (0, True, True)
    child.join(30)


def _frames_file(path, records=48):
    rng = np.random.default_rng(0)
    with RecordWriter(path) as w:
        for i in range(records):
            t = int(rng.integers(60, 301))
            w.write(make_sequence_example({}, {"rgb": [bytes([i % 256]) * 1024] * t, "audio": [bytes(128)] * t}))


def test_frames_and_padded_batches_fault_no_pages_in_pass_after_pass(tmp_path, monkeypatch):
    """YouTube-8M-like frames decoded and padded by pad_collate, pass after
    pass: after the first, the frames of each record and each padded batch go
    into memory used before. Fresh from malloc, glibc trimmed its heap between
    batches and the next batch faulted its pages in again: in the benchmark's
    800 records, 8,000-35,000 faults per pass, 1-2 per KiB of frames. (The
    records' payloads are held here: they are malloc's, read from the file.)"""
    from tfrecord_torch import read_records
    from tfrecord_torch.features import collate, specs
    from tfrecord_torch.features.sequence import make_spec

    # pools of this test's own: memory other tests of this process still hold is not reused, rightly
    monkeypatch.setattr(specs, "_FRAMES", Reused())
    monkeypatch.setattr(collate, "_BATCHES", Reused(keep=3))

    _frames_file(tmp_path / "f.tfrecord")
    payloads = [bytes(p) for p in read_records(tmp_path / "f.tfrecord")]
    spec = make_spec(None, {"rgb": RawTensor(shape=(1024,)), "audio": RawTensor(shape=(128,))})
    faults = []
    for _ in range(4):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        items = [spec.decode_payload(p) for p in payloads]
        batches = [pad_collate(items[i:i + 16], sequences=["rgb", "audio"]) for i in range(0, 48, 16)]
        firsts = [int(b["rgb"][i, 0, 0]) for b in batches for i in range(16)]
        del items, batches
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        assert firsts == list(range(48))
    # 48 records of 60-300 KiB of frames and 3 batches of 4 MiB: thousands of pages if each were new
    assert min(faults[1:]) < 100, faults


def test_a_held_padded_batch_is_not_written_over(tmp_path):
    _frames_file(tmp_path / "f.tfrecord", records=8)
    ds = TFRecordDataset(tmp_path, sequence_features={"rgb": RawTensor(shape=(1024,))})
    items = list(ds)
    held = [pad_collate(items[i:i + 2], sequences=["rgb"]) for i in range(0, 8, 2)]
    for _ in range(6):
        pad_collate(items[::-1], sequences=["rgb"])
    for k, batch in enumerate(held):
        for row in range(2):
            n = int(batch["rgb_length"][row])
            assert (batch["rgb"][row, :n] == 2 * k + row).all() and not batch["rgb"][row, n:].any()
    for i, item in enumerate(items):
        assert (item["rgb"] == i).all()


def _plain_arrays(queue):
    from tfrecord_torch.features import reused

    pool = Reused()
    reused.malloc_keeps_memory()
    arrays = [pool.take(1000), pool.take(3 << 20)]
    queue.put((not pool._slabs and not pool._large, [a.base is None for a in arrays]))


def test_where_malloc_keeps_its_memory_the_pools_step_aside():
    """A DataLoader worker whose heap workerheap.py tuned: plain arrays, no slabs kept."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_plain_arrays, args=(queue,))
    child.start()
    assert queue.get(timeout=30) == (True, [True, True])
    child.join(30)
    assert Reused().take(1000).base is not None  # here, the parent: carved from a slab


def test_a_longer_buffer_takes_the_place_of_the_shortest_free_one():
    """With ``keep`` buffers kept and none long enough, a new, longer one
    replaces the shortest free one (not the first in the list)."""
    pool = Reused(slab=1 << 16, keep=2)
    first = pool.take(400_000)
    second = pool.take(300_000)  # the first still held: a second buffer, shorter
    del first, second
    gc.collect()
    longer = pool.take(600_000)
    assert sorted(b.size for b in pool._large) == [500_000, 750_000]
    assert address(pool.take(400_000)) != address(longer)  # the 500 KB one, free


def test_trim_keeps_at_most_the_bytes_asked_and_never_hands_out_what_is_held():
    """trim forgets the newest buffers and slabs first until those kept hold
    at most the bytes asked; a buffer still held, even forgotten, is not
    handed out again, and those kept are still used again."""
    pool = Reused(slab=1 << 16, keep=4, largest=8 << 20)
    big = [pool.take(1 << 20) for _ in range(3)]  # 1.25 MiB buffers of their own
    pool.take(100)  # carved from a slab of 64 KiB
    held = big[2]
    held[:] = 7
    first = address(big[0])
    del big
    pool.trim(2 << 20)
    assert sum(b.nbytes for b in (*pool._large, *pool._slabs)) <= 2 << 20
    assert len(pool._large) == 1 and len(pool._slabs) == 1  # the two newer buffers forgotten
    again = [pool.take(1 << 20) for _ in range(3)]
    assert address(again[0]) == first  # kept: used again
    assert address(held) not in {address(a) for a in again}
    assert (held == 7).all()
    pool.trim(0)
    assert not pool._large and not pool._slabs
