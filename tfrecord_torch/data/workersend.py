"""A DataLoader worker gives up its core once after each batch it sends.

torch's worker hands each batch to a ``multiprocessing.Queue``: ``put``
appends it to a buffer and wakes the queue's *feeder* thread, which pickles
it and writes it to the pipe the main process reads. Meanwhile the worker's
own thread goes on with the next batch. When every core is busy decoding
(two workers on two cores, the training step's Python beside them), the
woken feeder thread waits for a core until the scheduler's next tick or
slice: the batch is ready, but not yet in the pipe, and the main process's
``next()`` waits for it. Measured on this project's 2 cores under the
training-loop benchmark (per sample, 2 workers, 256x256 JPEGs, the loop
asking 80% of the capacity): ``next()`` waited 2.1-4.7 ms at the median for
a batch its worker had already put, against 0.8 ms with the cores half idle.

So once a batch has gone out -- collated in the worker
(:func:`~tfrecord_torch.data.collating.collate_worker_items`) or yielded
whole in batch mode -- the worker's iterating thread calls
``os.sched_yield()`` before it starts on the next item: a feeder thread
waiting on that core runs first. Where nothing else waits, the call returns
at once (about a microsecond, once per batch).

This is one of the worker steps of :mod:`~tfrecord_torch.data.workersetup`
(``docs/guide/process.md``), under its switch: :func:`yield_after_sends`
turns it on in a worker; elsewhere :func:`sent` and :func:`settle` do nothing.
"""

from __future__ import annotations

import multiprocessing
import os

import torch.utils.data

__all__ = ["sent", "settle", "yield_after_sends", "yields_after_sends"]

_on = False  # this process is a worker that yields after a send
_pending = False  # a batch went out since the iterating thread last settled


def _after_fork() -> None:
    global _on, _pending
    _on = _pending = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def yield_after_sends() -> None:
    """In a DataLoader worker process (where ``os.sched_yield`` exists): from
    now on, :func:`settle` after :func:`sent` gives up the core once. A
    process that only looks like a worker (``get_worker_info`` patched in a
    test, no parent process) is left alone."""
    global _on
    _on = (hasattr(os, "sched_yield") and multiprocessing.parent_process() is not None
           and torch.utils.data.get_worker_info() is not None)


def yields_after_sends() -> bool:
    """Whether this process yields after each batch it sends."""
    return _on


def sent() -> None:
    """A batch is handed to torch's queue (or is about to be, once the collate returns)."""
    global _pending
    _pending = _on


def settle() -> None:
    """Before the iterating thread starts on its next item: give up the core
    once if a batch went out since the last call (see the module's doc)."""
    global _pending
    if _pending:
        _pending = False
        os.sched_yield()  # a thread waiting for this core (the feeder, woken by the put) runs first
