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

A spec error is not a data error: under ``"skip"``/``"warn"``, a reader (a
dataset's iteration in one process or DataLoader worker, or a map-style
dataset's process) that has delivered no record yet and meets
:data:`SLIP_RUN` records in a row failing the same way -- the same feature
(missing, of another kind, or not decoding), or the record not being an
Example -- raises the first of them, as ``"raise"`` would have; so does an
iteration that ends having delivered nothing, when every one of its records
(at least two) failed that way. A reader that ends an epoch with skips logs
one summary line: how many of how many records, by cause.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Union, cast

from tfrecord_torch.errors import CorruptRecordError, ExampleDecodeError, FeatureError, TFRecordError

__all__ = ["ON_ERROR", "SLIP_RUN", "ErrorPolicy", "OnError", "SkipTally", "as_policy"]

ON_ERROR = ("raise", "skip", "warn")
OnError = Union[str, Callable[[TFRecordError], object], "ErrorPolicy"]
log = logging.getLogger("tfrecord_torch")
SLIP_RUN = 8  # records failing the same way, before any was delivered, that make a skip a spec error


def slip_kind(error: TFRecordError) -> str | None:
    """What a spec mistake would fail on, for an error that one could cause:
    the feature (missing, of another kind, not decoding) or "not Examples";
    None for data errors no spec causes (a CRC, a truncation)."""
    if isinstance(error, FeatureError):
        return f"feature {error.key!r}"
    if isinstance(error, CorruptRecordError) and isinstance(error.__cause__, ExampleDecodeError):
        return "not Examples"
    return None


class SkipTally:
    """One reader's skips since it began (an epoch of an iteration, or a
    map-style dataset's process): records delivered and skipped, by cause,
    and the run of same-kind failures met before any record was delivered.

    Attributes:
        delivered: records delivered.
        causes: skips per cause ("feature 'label'", "CorruptRecordError", ...).
    """

    def __init__(self) -> None:
        self.delivered = 0
        self.causes: Counter = Counter()
        self._run: list[TFRecordError] = []  # same-kind failures, none delivered before them
        self._run_kind: str | None = None

    @property
    def skipped(self) -> int:
        return sum(self.causes.values())

    def add(self, error: TFRecordError) -> TFRecordError | None:
        """Count a skipped record; the error to raise instead, when it makes
        :data:`SLIP_RUN` failures of one kind before any delivery."""
        kind = slip_kind(error)
        self.causes[kind if kind is not None else type(error).__name__] += 1
        if self.delivered or kind is None:
            return None
        if kind != self._run_kind:
            self._run, self._run_kind = [], kind
        self._run.append(error)
        return self._spec_error() if len(self._run) >= SLIP_RUN else None

    def finished(self) -> TFRecordError | None:
        """The error to raise at the end of an iteration that delivered
        nothing, every one of its (at least two) skipped records having
        failed the same way; else None."""
        if not self.delivered and len(self._run) >= 2 and len(self._run) == self.skipped:
            return self._spec_error()
        return None

    def _spec_error(self) -> TFRecordError:
        first = self._run[0]
        note = (f"raised although on_error skips bad records: the first {len(self._run)} records read all "
                f"failed on {self._run_kind} and none was delivered, which is a mistake in the spec (or the "
                f"files), not a bad record; fix it, or give default= for a key some records lack")
        if hasattr(first, "add_note") and note not in getattr(first, "__notes__", ()):  # Python >= 3.11
            first.add_note(note)
        return first

    def summary(self, on_error: str, where: str) -> str:
        """The line an iteration that skipped records logs at its end."""
        causes = ", ".join(f"{n:,} {cause}" for cause, n in self.causes.most_common())
        return (f"{where}: skipped {self.skipped:,} of {self.delivered + self.skipped:,} records read under "
                f"on_error={on_error!r} ({causes}); dataset.errors() counts them over all workers")


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
        self.tally = SkipTally()  # this process's reader: see begin() and end()
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
            spec_error = self.tally.add(error)
        if callable(self.on_error):
            return
        log.warning("skipped: %s", error)
        if self.on_error == "warn":
            warnings.warn(f"tfrecord_torch skipped a record: {error}", RuntimeWarning, stacklevel=3)
        if spec_error is not None:
            raise spec_error

    def begin(self) -> None:
        """Start counting a reader's skips afresh (an iteration's start)."""
        self.tally = SkipTally()

    def delivered(self, n: int = 1) -> None:
        """Count ``n`` records delivered by this process's reader."""
        with self._guard():  # batch mode counts on its producer thread too
            self.tally.delivered += n

    def end(self, where: str) -> None:
        """An iteration's end: raise its spec error (see the module), or log
        one line if it skipped records (``where`` names the reader)."""
        if self.on_error not in ("skip", "warn"):
            return
        self.raise_spec_error()
        if self.tally.skipped:
            log.warning("%s", self.tally.summary(cast(str, self.on_error), where))

    def raise_spec_error(self) -> None:
        """Under "skip"/"warn", raise the first error of a reader that
        delivered nothing and whose every (two or more) skipped records failed
        the same way (see the module)."""
        spec_error = self.tally.finished() if self.on_error in ("skip", "warn") else None
        if spec_error is not None:
            raise spec_error

    def _counted(self, path: str) -> None:
        """Hook for shared counters (the datasets count across worker processes)."""

    def reporter(self) -> Callable[[TFRecordError], None] | None:
        """The callback for the framing layer: None means raise."""
        return None if self.raises else self.report


def as_policy(on_error: OnError) -> ErrorPolicy:
    """An ErrorPolicy from a policy object, a callable or one of ``ON_ERROR``."""
    return on_error if isinstance(on_error, ErrorPolicy) else ErrorPolicy(on_error)
