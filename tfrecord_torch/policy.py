"""The error policy: what readers do with a bad record.

``on_error`` is one of ``"raise"`` (the default), ``"skip"``, ``"warn"``, a
callable, or an :class:`ErrorPolicy`. ``"raise"`` raises. ``"skip"`` and ``"warn"`` drop the record
and go on: a record whose payload CRC fails, or that does not decode, is
skipped; a header whose length CRC fails, or a truncated or undecompressible
stream, ends that shard (the length cannot be trusted), unless an index gives
the next record's offset, in which case reading resumes there. Every skip is
logged (``"warn"`` also issues a RuntimeWarning) with the file, byte offset
and record number, and counted. A callable receives each
:class:`~tfrecord_torch.TFRecordError` and decides: it raises to stop, or
returns to skip the record (the skip is counted, not logged)::

    def on_error(error):
        if error.path.endswith("-00003-of-00010"):
            raise error  # this shard must be clean
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Union

from tfrecord_torch.errors import TFRecordError

__all__ = ["ON_ERROR", "ErrorPolicy", "OnError", "as_policy"]

ON_ERROR = ("raise", "skip", "warn")
OnError = Union[str, Callable[[TFRecordError], object], "ErrorPolicy"]
log = logging.getLogger("tfrecord_torch")


class ErrorPolicy:
    """Applies an ``on_error`` choice and counts what was skipped.

    Attributes:
        counts: skipped records (or shard ends) per file path.
        total: their sum.
    """

    def __init__(self, on_error: OnError = "raise") -> None:
        choice = on_error.on_error if isinstance(on_error, ErrorPolicy) else on_error
        if not callable(choice) and choice not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR} or a callable, got {choice!r}")
        self.on_error: str | Callable[[TFRecordError], object] = choice
        self.counts: Counter = Counter()
        self._lock, self._lock_pid = threading.Lock(), os.getpid()

    def _guard(self) -> threading.Lock:
        """The lock of this process (a forked child gets a fresh one: the parent's may be held)."""
        if self._lock_pid != os.getpid():
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        return self._lock

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_lock_pid")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock, self._lock_pid = threading.Lock(), os.getpid()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.on_error!r}, skipped={self.total})"

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
        if callable(self.on_error):
            self.on_error(error)  # raises to stop
        path = getattr(error, "path", None) or "<unknown>"
        with self._guard():  # counts are read-modify-writes; readers may report from several threads
            self.counts[path] += 1
            self._counted(path)
        if callable(self.on_error):
            return
        log.warning("skipped: %s", error)
        if self.on_error == "warn":
            warnings.warn(f"tfrecord_torch skipped a record: {error}", RuntimeWarning, stacklevel=3)

    def _counted(self, path: str) -> None:
        """Hook for shared counters (the datasets count across worker processes)."""

    def reporter(self) -> Callable[[TFRecordError], None] | None:
        """The callback for the framing layer: None means raise."""
        return None if self.raises else self.report


def as_policy(on_error: OnError) -> ErrorPolicy:
    """An ErrorPolicy from a policy object, a callable or one of ``ON_ERROR``."""
    return on_error if isinstance(on_error, ErrorPolicy) else ErrorPolicy(on_error)
