"""Error policies: what readers do with a bad record.

``"raise"`` (the default) raises. ``"skip"`` and ``"warn"`` drop the record
and go on: a record whose payload CRC fails, or that does not decode, is
skipped; a header whose length CRC fails, or a truncated or undecompressible
stream, ends that shard (the length cannot be trusted), unless an index gives
the next record's offset, in which case reading resumes there. Every skip is
logged (``"warn"`` also issues a RuntimeWarning) with the file, byte offset
and record number, and counted.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter

from .errors import TFRecordError

__all__ = ["ON_ERROR", "ErrorPolicy", "SharedErrorPolicy", "as_policy"]

ON_ERROR = ("raise", "skip", "warn")
log = logging.getLogger("tfrecord_torch")


class ErrorPolicy:
    """Applies an ``on_error`` choice and counts what was skipped.

    Attributes:
        counts: skipped records (or shard ends) per file path.
        total: their sum.
    """

    def __init__(self, on_error: str = "raise") -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.on_error = on_error
        self.counts: Counter = Counter()

    @property
    def raises(self) -> bool:
        return self.on_error == "raise"

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def report(self, error: TFRecordError) -> None:
        """Raise ``error``, or log and count it (the caller skips the record)."""
        if self.on_error == "raise":
            raise error
        path = getattr(error, "path", None) or "<unknown>"
        self.counts[path] += 1
        self._counted(path)
        log.warning("skipped: %s", error)
        if self.on_error == "warn":
            warnings.warn(f"tfrecord_torch skipped a record: {error}", RuntimeWarning, stacklevel=3)

    def _counted(self, path: str) -> None:
        """Hook for shared counters (the datasets count across worker processes)."""

    def reporter(self):
        """The callback for the framing layer: None means raise."""
        return None if self.raises else self.report


def as_policy(on_error) -> ErrorPolicy:
    """An ErrorPolicy from a policy object or one of ``ON_ERROR``."""
    return on_error if isinstance(on_error, ErrorPolicy) else ErrorPolicy(on_error)


_ROWS = 17  # the process that made the dataset, then DataLoader workers 0..15 (more share rows)


class SharedErrorPolicy(ErrorPolicy):
    """An ErrorPolicy whose per-file counts live in shared memory, so skips in
    DataLoader worker processes are counted where the dataset was made. Each
    process counts in a row of its own (an increment is a read-modify-write,
    which two processes sharing one cell could lose); rows are summed on read."""

    def __init__(self, on_error: str, paths: list[str]) -> None:
        import torch

        super().__init__(on_error)
        self.paths = list(paths)
        self._slot = {p: i for i, p in enumerate(self.paths)}
        self._shared = torch.zeros((_ROWS, len(self.paths) + 1), dtype=torch.int64).share_memory_()

    def _counted(self, path: str) -> None:
        import torch.utils.data

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
