"""The exit of a spawned DataLoader worker (data/workerexit.py): stopped
while its queue's feeder thread still pickles or frees tensors, it exits
cleanly instead of dying of SIGABRT in interpreter finalization, with no
thread of the library alive; the wait it makes for the feeders ends when
they end, and after :data:`FEEDER_WAIT` at most."""

import atexit
import functools
import json
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading

import pytest
import torch
from helpers import write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import Batching, TFRecordDataset
from tfrecord_torch.data import workerexit
from tfrecord_torch.data.workerexit import feeder_threads


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
    that are feeders still sending."""
    def record():
        names = [t.name for t in threading.enumerate()]
        sending = [t.name for t in feeder_threads()]
        (folder / f"{worker_id}.threads").write_text(json.dumps({"alive": names, "sending": sending}))
    atexit.register(record)


@pytest.mark.slow  # spawned workers importing torch: about 12 s of CPU
def test_a_spawned_worker_stopped_mid_epoch_exits_without_library_threads(tmp_path):
    """Batch mode with a prefetch thread, stopped mid-epoch: when a spawned
    worker reaches its exit handlers, no thread of the library is alive and
    no feeder is left sending (interpreter finalization then meets no thread
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
        assert seen["sending"] == []


class _Gated:
    """Pickling waits until ``gate`` is set (a feeder holding an item)."""

    def __init__(self, gate):
        self.gate = gate

    def __reduce__(self):
        self.gate.wait()
        return (int, (0,))


def _exit_wait(timeout):
    """The worker's exit wait, on a thread of its own (joined by the caller)."""
    waiter = threading.Thread(target=workerexit._let_feeders_finish, args=(timeout,))
    waiter.start()
    return waiter


def _closed(queue):
    """``queue`` closed as torch's worker loop closes it before the process
    exits; a connection reading its pipe still (the other process's end)."""
    reader = multiprocessing.connection.Connection(os.dup(queue._reader.fileno()))
    queue.close()
    return reader


def test_the_exit_waits_for_a_closed_queues_feeder_to_send_what_it_holds():
    queue = multiprocessing.get_context("spawn").Queue()
    gate = threading.Event()
    try:
        queue.put(_Gated(gate))
        reader = _closed(queue)
        waiter = _exit_wait(60)
        waiter.join(0.5)
        assert waiter.is_alive()  # the feeder still pickles the item
        gate.set()
        assert pickle.loads(reader.recv_bytes()) == 0
        waiter.join(30)
        assert not waiter.is_alive()
        assert feeder_threads() == []
        reader.close()
    finally:
        gate.set()
        queue.join_thread()


def test_the_exit_wait_is_bounded_when_a_feeder_cannot_finish_its_write():
    """Nobody reads: the feeder blocks writing an item larger than the pipe
    holds (already pickled); the exit waits no longer than it is given."""
    queue = multiprocessing.get_context("spawn").Queue()
    queue.put(b"x" * (4 << 20))
    reader = _closed(queue)
    waiter = _exit_wait(0.2)
    waiter.join(30)
    assert not waiter.is_alive()
    assert queue._thread.is_alive()  # still writing
    assert len(pickle.loads(reader.recv_bytes())) == 4 << 20  # let it finish
    queue.join_thread()
    reader.close()
