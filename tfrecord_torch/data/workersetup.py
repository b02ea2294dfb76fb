"""What a DataLoader worker process sets in itself at its first item, once:
every change the library makes to a process it does not own, in one place
(``docs/guide/process.md`` lists them), under one switch.

The datasets call :func:`settle_worker` for every item (a DataLoader worker
is first met there, not before); past the first call of a process it is one
flag read. The first call runs each step, unless the user turned them off
(``TFRECORD_TORCH_WORKER_TUNING=off``, read in the worker), and each step
decides for itself whether this process is a worker it should change:

* :func:`~tfrecord_torch.data.workergc.freeze_inherited`: the collector
  leaves alone what a forked worker inherited;
* :func:`~tfrecord_torch.data.workerheap.tune_heap`: glibc's malloc thresholds;
* :func:`~tfrecord_torch.data.workerexit.finish_sends_at_exit`: at exit, the
  queues' feeder threads let go of the items they send;
* :func:`~tfrecord_torch.data.workersend.yield_after_sends`: after each batch
  it sends, the worker's iterating thread gives up its core once, so that
  the queue's feeder thread writes the batch to the pipe without waiting
  for a core.
"""

from __future__ import annotations

import os

from tfrecord_torch.data.workerexit import finish_sends_at_exit
from tfrecord_torch.data.workergc import freeze_inherited
from tfrecord_torch.data.workerheap import tune_heap
from tfrecord_torch.data.workersend import yield_after_sends

__all__ = ["ENV", "settle_worker", "tuning_on"]

ENV = "TFRECORD_TORCH_WORKER_TUNING"
"""The one switch: ``off`` (or 0, false, no, none) leaves every worker process as torch made it."""
_OFF = frozenset({"off", "0", "false", "no", "none"})

_settled = False  # this process ran the steps (a forked child starts over)


def _after_fork() -> None:
    global _settled
    _settled = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def settle_worker() -> None:
    """Once per process: the steps above (each a no-op outside a DataLoader worker)."""
    global _settled
    if _settled:
        return
    _settled = True
    if not tuning_on(os.environ):
        return
    freeze_inherited()
    tune_heap()
    finish_sends_at_exit()
    yield_after_sends()


def tuning_on(env) -> bool:
    """Whether the environment ``env`` leaves the worker steps on (the default)."""
    return env.get(ENV, "").strip().lower() not in _OFF
