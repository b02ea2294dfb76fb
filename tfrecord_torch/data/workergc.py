"""The cyclic garbage collector in a DataLoader worker.

A forked worker inherits every object of the main process -- some 340,000
once torch and torchvision are imported -- and the collector's counts with
them, so a full collection falls due soon after the fork: it walks all of
them (0.4-1 s per worker per epoch measured here, for a 4,000-image epoch
that takes 2 s on 2 cores) and writes the header of each, copying every
page they lie in (copy-on-write). :func:`freeze_inherited`, at a worker's
first item, moves the objects it holds so far out of the collector's sight
in that worker (``gc.freeze()``: Python's own advice for fork without
exec). Only a forked worker freezes: a spawned one inherits nothing, and a
process that merely looks like a worker (``get_worker_info`` patched in a
test) is not one. The worker's own objects are collected as before; the
main process is left alone. Frozen objects are never collected in that worker, so a
cycle among them that becomes garbage there stays until the worker exits,
as it would in a process that never collects.
"""

from __future__ import annotations

import gc
import os

import torch.utils.data

__all__ = ["freeze_inherited"]

_frozen_in = -1  # the pid that froze
_forked = False  # this process was forked from one that had imported this module


def _after_fork() -> None:
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork)


def freeze_inherited() -> None:
    """In a forked DataLoader worker, once: ``gc.freeze()``; elsewhere nothing."""
    global _frozen_in
    pid = os.getpid()
    if _frozen_in == pid or not _forked or torch.utils.data.get_worker_info() is None:
        return
    _frozen_in = pid
    gc.freeze()
