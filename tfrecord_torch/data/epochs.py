"""Which epoch an iteration reads, the same with or without persistent workers.

Each new iteration starts the next epoch (tf.data reshuffles on every
iteration) unless :meth:`EpochCounter.set` named one. DataLoader workers get
copies of the dataset -- fresh ones every epoch, or the same ones all along
with ``persistent_workers=True`` -- so the count of iterations started lives
in shared memory, one cell per worker id, and the epoch of an iteration is
``set epoch + iterations that worker id started since``. Both ways give
epoch e the same order.

The same memory records which reader started the latest iteration, so the
dataset in the main process can tell that DataLoader workers, not itself,
are reading (:meth:`EpochCounter.read_in_workers`) -- with fork or spawn,
since the workers' copies map the same cells.
"""

from __future__ import annotations

import torch
import torch.utils.data

__all__ = ["EpochCounter"]

_ROWS = 257  # the process that made the dataset (no workers), then workers 0..255
_LAST = _ROWS + 1  # the cell holding the row of the reader that started the latest iteration


class EpochCounter:
    """Shared epoch bookkeeping of one dataset: cell 0 holds the epoch last set,
    cell 1 + r the iterations started since by reader r (r = 0 without
    workers, r = 1 + worker id in a DataLoader worker), the last cell the
    row of the reader that started the latest iteration (0: none since)."""

    def __init__(self, epoch: int = 0) -> None:
        self._shared = torch.zeros(_LAST + 1, dtype=torch.int64).share_memory_()
        self._shared[0] = int(epoch)

    @staticmethod
    def _row() -> int:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return 1
        if info.id >= _ROWS - 1:
            raise ValueError(f"at most {_ROWS - 1} DataLoader workers are supported, got worker {info.id}")
        return 2 + info.id

    def set(self, epoch: int) -> None:
        """The next iteration of every reader reads ``epoch``, the one after ``epoch + 1``, ..."""
        self._shared[1:] = 0
        self._shared[0] = int(epoch)

    def restore(self, epoch: int) -> None:
        """This reader's next iteration reads ``epoch`` (a resumed state's);
        other readers restore theirs to the same epoch."""
        self._shared[0] = int(epoch)
        self._shared[self._row()] = 0
        self._shared[_LAST] = 0

    def peek(self) -> int:
        """The epoch this reader's next iteration will read."""
        return int(self._shared[0]) + int(self._shared[self._row()])

    def start(self) -> int:
        """Count an iteration of this reader; returns the epoch it reads."""
        row = self._row()
        epoch = int(self._shared[0]) + int(self._shared[row])
        self._shared[row] += 1
        self._shared[_LAST] = row
        return epoch

    def latest(self) -> int:
        """The epoch of the latest iteration any reader started since
        :meth:`set` (the epoch set, if none has)."""
        row = int(self._shared[_LAST])
        return int(self._shared[0]) + (max(int(self._shared[row]) - 1, 0) if row else 0)

    def read_in_workers(self) -> bool:
        """True in the main process when the latest iteration since
        :meth:`set` was started by a DataLoader worker: the position is then
        the workers', which this process cannot see."""
        return torch.utils.data.get_worker_info() is None and int(self._shared[_LAST]) > 1
