"""The exit of a spawned DataLoader worker.

A worker sends each item to the main process through a
``multiprocessing.Queue``, whose daemon *feeder* thread pickles the item
(torch copies a tensor into shared memory there with the GIL released; the
small tensors of a batch go by value, :mod:`.transport.shipped`) and then
drops it (freeing a tensor releases the GIL too). When the main process
stops the workers (``del it``, a ``break``, the end of an epoch), torch's
worker loop lets the process exit without waiting for that thread, and a
worker started by spawn exits through interpreter finalization. A daemon
thread that takes the GIL back during finalization is ended by
``pthread_exit``, whose unwinding through torch's C++ frames calls
``std::terminate``: the worker dies of SIGABRT ("terminate called without
an active exception"; pytorch/pytorch#38228, CPython gh-87135), and the
main process reports "DataLoader worker ... is killed by signal: Aborted".
A worker started by fork or forkserver leaves through ``os._exit``, without
finalization, and is not affected.

:func:`finish_sends_at_exit`, called by the datasets in a worker, has such a
worker wait at exit, before finalization, until its feeder threads hold no
item: ended, idle, or writing bytes already pickled (a write blocked on a
pipe the main process no longer reads, or on the lock of the queue that
another worker writes to, holds no tensor, and finalization ends it
safely). The wait is bounded by :data:`FEEDER_WAIT` seconds, below the 5 s
the main process gives a worker to exit.
"""

from __future__ import annotations

import atexit
import dis
import functools
import multiprocessing
import multiprocessing.connection
import multiprocessing.queues
import os
import sys
import threading
import time

import torch.utils.data

__all__ = ["FEEDER_WAIT", "feeders_holding_items", "finish_sends_at_exit"]

FEEDER_WAIT = 2.0  # the longest a worker waits at exit for its feeder threads (seconds)

_FEEDER = "QueueFeederThread"  # multiprocessing.Queue's thread
_checked_in = -1  # the pid that decided whether its exit waits


def finish_sends_at_exit() -> None:
    """In a DataLoader worker, once per process: at exit, wait (at most
    :data:`FEEDER_WAIT` s) for the queues' feeder threads to let go of the
    items they send; elsewhere nothing. (A worker started by fork or
    forkserver never runs exit handlers; it needs none.)"""
    global _checked_in
    pid = os.getpid()
    if _checked_in == pid:
        return
    _checked_in = pid
    if multiprocessing.parent_process() is not None and torch.utils.data.get_worker_info() is not None:
        atexit.register(_let_feeders_finish)


def _let_feeders_finish(timeout: float = FEEDER_WAIT) -> None:
    deadline = time.monotonic() + timeout
    while feeders_holding_items() and time.monotonic() < deadline:
        time.sleep(0.002)  # the feeder takes the GIL meanwhile


def feeders_holding_items() -> list[threading.Thread]:
    """The feeder threads of this process's queues that hold an item: taken
    from the queue's buffer and not yet pickled, or whose original is being
    freed. Not those ended, waiting for items, or writing bytes."""
    frames = sys._current_frames()
    holding = []
    for thread in threading.enumerate():
        if thread.name != _FEEDER or not thread.daemon:
            continue
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is not None and not _between_items(frame):
            holding.append(thread)
    return holding


def _between_items(frame) -> bool:
    """Whether a feeder's innermost frame ``frame`` is writing bytes already
    pickled, waiting for the lock to write them (another worker writes to the
    shared queue), or waiting for items with none left to send (not woken
    by one just put)."""
    code = frame.f_code
    if code.co_filename == multiprocessing.connection.__file__:
        return True
    if code is _FEED:
        return frame.f_lasti in _lock_calls()
    caller = frame.f_back
    if code.co_filename != threading.__file__ or code.co_name != "wait" or caller is None or caller.f_code is not _FEED:
        return False
    return not caller.f_locals.get("buffer", True)


_FEED = multiprocessing.queues.Queue._feed.__code__  # type: ignore[attr-defined]  # the feeder thread's function


@functools.cache
def _lock_calls() -> frozenset[int]:
    """The offsets in the feeder's code of its calls taking the write lock,
    made once an item is pickled and its original let go (none found on a
    Python whose feeder reads otherwise: the wait is then bounded only).
    Each call's instructions after loading ``wacquire`` count: a specialized
    ``PRECALL`` makes the call itself (Python 3.11)."""
    calls: set[int] = set()
    sequence: list[int] | None = None  # the offsets since wacquire was loaded
    for instruction in dis.get_instructions(_FEED):
        if instruction.opname == "LOAD_FAST" and instruction.argval == "wacquire":
            sequence = []
        elif sequence is not None and instruction.opname in ("PRECALL", "PUSH_NULL", "CACHE"):
            sequence.append(instruction.offset)
        elif sequence is not None and instruction.opname == "CALL":
            calls.update(sequence + [instruction.offset])
            sequence = None
        else:
            sequence = None
    return frozenset(calls)
