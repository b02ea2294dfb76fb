"""Skip counts shared by a dataset's DataLoader worker processes."""

from __future__ import annotations

import torch
import torch.utils.data

from tfrecord_torch.policy import ErrorPolicy, OnError

__all__ = ["SharedErrorPolicy"]

_ROWS = 17  # the process that made the dataset, then DataLoader workers 0..15 (more share rows)


class SharedErrorPolicy(ErrorPolicy):
    """An ErrorPolicy whose per-file counts live in shared memory, so skips in
    DataLoader worker processes are counted where the dataset was made. Each
    process counts in a row of its own (an increment is a read-modify-write,
    which two processes sharing one cell could lose); rows are summed on read."""

    def __init__(self, on_error: OnError, paths: list[str]) -> None:
        super().__init__(on_error)
        self.paths = list(paths)
        self._slot = {p: i for i, p in enumerate(self.paths)}
        self._shared = torch.zeros((_ROWS, len(self.paths) + 1), dtype=torch.int64).share_memory_()

    def _counted(self, path: str) -> None:
        info = torch.utils.data.get_worker_info()
        row = 0 if info is None else 1 + info.id % (_ROWS - 1)
        self._shared[row, self._slot.get(path, len(self.paths))] += 1

    def summary(self) -> dict:
        """``{"total": n, "per_shard": {path: n}}`` over every process so far."""
        values = self._shared.sum(dim=0).tolist()
        per_shard = {p: n for p, n in zip(self.paths + ["<other>"], values) if n}
        return {"total": sum(values), "per_shard": per_shard}

    def reset(self) -> None:
        self._shared.zero_()
