"""The exit of a spawned DataLoader worker.

A worker sends each item to the main process through a
``multiprocessing.Queue``, whose daemon *feeder* thread pickles the item
(torch copies a tensor into shared memory there with the GIL released; the
small tensors of a batch go by value, :mod:`.transport.shipped`) and then
drops it (freeing a tensor releases the GIL too). When the main process
stops the workers (``del it``, a ``break``, the end of an epoch), torch's
worker loop closes its queue and lets the process exit without waiting for
that thread, and a worker started by spawn exits through interpreter
finalization. A daemon thread that takes the GIL back during finalization is
ended by ``pthread_exit``, whose unwinding through torch's C++ frames calls
``std::terminate``: the worker dies of SIGABRT ("terminate called without
an active exception"; pytorch/pytorch#38228, CPython gh-87135), and the
main process reports "DataLoader worker ... is killed by signal: Aborted".
A worker started by fork or forkserver leaves through ``os._exit``, without
finalization, and is not affected.

:func:`finish_sends_at_exit`, called in a worker, has a spawned worker wait
at exit, before finalization, for its queues' feeder threads to end: a
closed queue's feeder sends what it holds and ends. The wait is bounded by
:data:`FEEDER_WAIT` seconds, below the 5 s the main process gives a worker
to exit; it lasts that long only when a feeder cannot finish its write
(the main process no longer reads a full pipe), and then the feeder holds
bytes already pickled, which finalization ends safely.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
import time

import torch.utils.data

__all__ = ["FEEDER_WAIT", "feeder_threads", "finish_sends_at_exit"]

FEEDER_WAIT = 2.0  # the longest a worker waits at exit for its feeder threads (seconds)

_FEEDER = "QueueFeederThread"  # multiprocessing.Queue's thread
_checked_in = -1  # the pid that decided whether its exit waits


def finish_sends_at_exit() -> None:
    """In a DataLoader worker, once per process: at exit, wait (at most
    :data:`FEEDER_WAIT` s) for the queues' feeder threads to end; elsewhere
    nothing. (A worker started by fork or forkserver never runs exit
    handlers; it needs none.)"""
    global _checked_in
    pid = os.getpid()
    if _checked_in == pid:
        return
    _checked_in = pid
    if multiprocessing.parent_process() is not None and torch.utils.data.get_worker_info() is not None:
        atexit.register(_let_feeders_finish)


def _let_feeders_finish(timeout: float = FEEDER_WAIT) -> None:
    deadline = time.monotonic() + timeout
    for thread in feeder_threads():
        thread.join(max(0.0, deadline - time.monotonic()))


def feeder_threads() -> list[threading.Thread]:
    """The feeder threads of this process's queues that are alive."""
    return [t for t in threading.enumerate() if t.name == _FEEDER and t.daemon and t.is_alive()]
