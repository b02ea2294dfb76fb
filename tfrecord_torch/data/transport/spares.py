"""Segments that outlive the worker that made them, taken up by the next.

A DataLoader whose workers are not persistent forks new ones each epoch, and
each made its batch segments afresh (:class:`~.shipped.SharedBuffers`): the
kernel zeroes a new segment's pages, 18 ms for a batch of 64 500x375 RGB
images here, three or four times a worker each epoch, on the way to its first
batches. The main process keeps the segments it received mapped after their
worker is gone (:class:`~.shipped._Mapped`), and a worker forked afterwards
inherits those mappings. Such a worker takes one up in place of a new segment
when:

- the worker that made it, or last took it up, is gone;
- the main process holds nothing made from its last batch (its flag is clear);
- no other process took it up first: the taker holds an exclusive ``flock`` on
  an open of its own of the segment's file for as long as it lives, and the
  kernel lets go of that lock when the process ends, however it ends (two
  DataLoaders' workers forked at once see the same spares).

The segments are there already, mapped in the main process until its next
worker sends a segment of its own (as before), so nothing is held longer.
Where a segment has no file descriptor (torch's ``file_system`` sharing
strategy) or the platform has no ``/proc/self/fd``, nothing is taken up.
"""

from __future__ import annotations

import fcntl
import os
import threading
from typing import NamedTuple

import numpy as np
import torch
import torch.utils.data

from tfrecord_torch._dtypes import numpy_dtype

__all__ = ["Spare", "Spares"]


class Spare(NamedTuple):
    """A segment the main process held mapped at the fork, with the flag of
    the slot its last sender kept it in."""

    key: tuple[int, int]
    segment: torch.Tensor
    flags: torch.Tensor
    slot: int


class Spares:
    """In a forked DataLoader worker: the spares it inherited, taken up one at
    a time by fit; elsewhere, none. Safe from several threads."""

    def __init__(self) -> None:
        self._pid = -1
        self._lock = threading.Lock()
        self._left: list[Spare] = []
        self._claims: dict[int, int] = {}  # id(segment) -> the descriptor holding its lock

    def take(self, inherited: list[Spare], dtype: np.dtype, numel: int) -> torch.Tensor | None:
        """A spare segment of ``dtype`` with ``numel`` elements at least and
        twice that at most (a loader of small images does not hold a loader of
        large ones' segments), now this process's (its lock held), or None."""
        with self._lock:
            if self._pid != os.getpid():  # the first take after a fork
                self._pid, self._claims = os.getpid(), {}
                self._left = sorted(inherited) if torch.utils.data.get_worker_info() is not None else []
            for spare in list(self._left):
                segment = spare.segment
                if numpy_dtype(segment.dtype) != dtype or not numel <= segment.numel() <= 2 * numel or \
                        not segment.is_contiguous():
                    continue
                self._left.remove(spare)
                claim = _claim(spare)
                if claim is not None:
                    self._claims[id(segment)] = claim
                    return segment
            return None

    def let_go(self, segment: torch.Tensor) -> None:
        """``segment`` is no longer this process's: another may take it up."""
        with self._lock:
            claim = self._claims.pop(id(segment), None)
        if claim is not None:
            os.close(claim)


def _claim(spare: Spare) -> int | None:
    """A descriptor holding ``spare``'s lock, if its sender is gone, nothing
    received over it is alive and no other process holds it; else None."""
    if _alive(spare.key[0]):
        return None
    try:
        fd, _ = spare.segment.untyped_storage()._share_fd_cpu_()
        claim = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except (RuntimeError, OSError):  # no descriptor (file_system strategy), no /proc
        return None
    try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # another process took it up
        os.close(claim)
        return None
    if int(spare.flags[spare.slot]) != 0:  # the main process still holds a batch over it
        os.close(claim)
        return None
    return claim


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
