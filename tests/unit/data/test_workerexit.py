"""The exit of a spawned DataLoader worker (data/workerexit.py): stopped
while its queue's feeder thread still pickles or frees tensors, it exits
cleanly instead of dying of SIGABRT in interpreter finalization, with no
thread of the library alive; the wait it makes for the feeder ends when
the feeder only writes bytes or waits."""

import atexit
import functools
import json
import multiprocessing
import sys
import threading
import time

import pytest
import torch
from helpers import write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import Batching, TFRecordDataset
from tfrecord_torch.data.workerexit import feeders_holding_items


def _with_large_tensor(item):
    # not in shared memory: the feeder thread copies it there, with the GIL released
    return {**item, "large": torch.ones(16 << 20, dtype=torch.uint8)}


@pytest.mark.slow  # spawned workers importing torch: about 10 s of CPU; the feeders' checks below are fast
def test_spawned_workers_stopped_while_sending_exit_cleanly(tmp_path):
    """A loader dropped after one item, its workers still sending the items
    prefetched: every worker exits with code 0 (not -6, SIGABRT: "terminate
    called without an active exception" from the feeder thread). Only spawn:
    fork and forkserver workers leave without interpreter finalization."""
    write_shards(tmp_path, [20, 20])
    ds = TFRecordDataset(tmp_path, transform=_with_large_tensor)
    loader = DataLoader(ds, num_workers=2, multiprocessing_context="spawn", batch_size=None,
                        prefetch_factor=8)
    it = iter(loader)
    item = next(it)
    assert item["large"].shape == (16 << 20,)
    workers = list(it._workers)  # the iterator joins them when dropped
    del it
    assert [w.exitcode for w in workers] == [0, 0]


def _record_threads_at_exit(folder, worker_id):
    """worker_init_fn: at the worker's exit (after the datasets' own exit
    handler, registered later), write the threads alive and those of them
    that are feeders holding an item."""
    def record():
        names = [t.name for t in threading.enumerate()]
        holding = [t.name for t in feeders_holding_items()]
        (folder / f"{worker_id}.threads").write_text(json.dumps({"alive": names, "holding": holding}))
    atexit.register(record)


@pytest.mark.slow  # spawned workers importing torch: about 12 s of CPU
def test_a_spawned_worker_stopped_mid_epoch_exits_without_library_threads(tmp_path):
    """Batch mode with a prefetch thread, stopped mid-epoch: when a spawned
    worker reaches its exit handlers, no thread of the library is alive and
    no feeder holds an item (interpreter finalization then meets no thread
    inside torch)."""
    shards, records = tmp_path / "shards", tmp_path / "records"
    shards.mkdir()
    records.mkdir()
    write_shards(shards, [40, 40])
    ds = TFRecordDataset(shards, shuffle=True, batch_size=4, batching=Batching(prefetch=2))
    loader = DataLoader(ds, num_workers=2, multiprocessing_context="spawn", batch_size=None,
                        worker_init_fn=functools.partial(_record_threads_at_exit, records))
    it = iter(loader)
    for _ in range(3):
        next(it)
    workers = list(it._workers)
    del it
    assert [w.exitcode for w in workers] == [0, 0]
    for worker in range(2):
        seen = json.loads((records / f"{worker}.threads").read_text())
        assert [n for n in seen["alive"] if n.startswith(("tfrecord", "open-shards"))] == []
        assert seen["holding"] == []


class _Gated:
    """Pickling waits until ``gate`` is set (a feeder holding an item)."""

    def __init__(self, gate):
        self.gate = gate

    def __reduce__(self):
        self.gate.wait()
        return (int, (0,))


def _feeder(queue):
    """The queue's feeder thread, once its first put started it."""
    return queue._thread


def test_a_feeder_pickling_an_item_holds_it():
    queue = multiprocessing.get_context("spawn").Queue()
    gate = threading.Event()
    try:
        queue.put(_Gated(gate))
        assert _wait_until(lambda: _feeder(queue) in feeders_holding_items())
        gate.set()
        assert queue.get(timeout=30) == 0
        assert _wait_until(lambda: _feeder(queue) not in feeders_holding_items())  # waiting for the next item
    finally:
        gate.set()
        queue.close()
        queue.join_thread()


def test_a_feeder_not_yet_woken_by_an_item_holds_it():
    """An item put, the feeder still in its wait (not yet scheduled): it will
    pickle the item, so it counts as holding it."""
    queue = multiprocessing.get_context("spawn").Queue()
    try:
        queue.put(b"first")
        assert queue.get(timeout=30) == b"first"
        assert _wait_until(lambda: _waiting(_feeder(queue)))  # sent, back in its wait
        assert _feeder(queue) not in feeders_holding_items()
        with queue._notempty:  # the state between put's append and the feeder's waking
            queue._sem.acquire()  # as put does
            queue._buffer.append(b"second")
            assert _feeder(queue) in feeders_holding_items()
            queue._notempty.notify()
        assert queue.get(timeout=30) == b"second"
    finally:
        queue.close()
        queue.join_thread()


def _waiting(thread):
    """Whether ``thread`` waits on a condition (a feeder: for items)."""
    return sys._current_frames()[thread.ident].f_code is threading.Condition.wait.__code__


def _wait_until(condition, seconds=30):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_a_feeder_blocked_writing_to_a_full_pipe_holds_nothing():
    """Nobody reads: the feeder writes an item larger than the pipe holds and
    blocks there, the item already pickled (no wait is needed at exit)."""
    queue = multiprocessing.get_context("spawn").Queue()
    try:
        queue.put(b"x" * (4 << 20))
        assert _wait_until(lambda: _feeder(queue) not in feeders_holding_items())
        assert _feeder(queue).is_alive()  # still writing
        assert len(queue.get(timeout=30)) == 4 << 20
    finally:
        queue.close()
        queue.join_thread()


def test_a_feeder_waiting_for_the_write_lock_holds_nothing():
    """Workers share one queue: a feeder waits for the lock while another
    worker writes, its item already pickled."""
    queue = multiprocessing.get_context("spawn").Queue()
    lock = queue._wlock  # what another worker's feeder holds while it writes
    lock.acquire()
    try:
        queue.put(b"x")
        assert _wait_until(lambda: _feeder(queue) not in feeders_holding_items())
        assert _feeder(queue).is_alive()
    finally:
        lock.release()
    assert queue.get(timeout=30) == b"x"
    queue.close()
    queue.join_thread()
