"""Telling a stale index from a corrupt file.

An index gives each record's offset and size. When the file changes after
it was indexed (rewritten, records reordered), a read at an indexed offset
can land inside another record: its "header" fails its CRC, which is also
what corruption looks like. :func:`explain` tells them apart, once per file
and index: it scans the file afresh; a file that scans clean but not as the
index says has a stale index (:class:`StaleIndexError`), anything else is
the corruption it seemed.
"""

from __future__ import annotations

import threading

import numpy as np

from tfrecord_torch.errors import CorruptRecordError, RemoteError, StaleIndexError, TFRecordError
from tfrecord_torch.io.copies import damaged_copy
from tfrecord_torch.io.files import is_url
from tfrecord_torch.io.listing import changed_since_listed
from tfrecord_torch.records.index import scan_index

__all__ = ["explain"]

_VERDICTS: dict[tuple[str, int, int], bool] = {}  # (path, index id, len) -> the index is stale
_LOCK = threading.Lock()


def explain(error: CorruptRecordError, index: np.ndarray, storage_options: dict | None = None) -> TFRecordError:
    """The error to raise for ``error``, met reading ``index``'s record
    ``error.record``: :class:`StaleIndexError` if the index, not the file, is wrong;
    :class:`RemoteError` if a local copy of a remote shard, not the object, is,
    or if the remote object is not the one its listing saw (rewritten since)."""
    r = error.record
    if r is not None and 0 <= r < len(index) and is_url(error.path):
        offset, size = int(index[r, 0]), int(index[r, 1])
        entry = damaged_copy(error.path, offset, size, storage_options)
        if entry is not None:
            return RemoteError(error.path, f"record {r} at byte {offset} (cached copy at {entry}): the copy "
                                           "differs from the object there (damaged by another process); it "
                                           "was removed: read again to copy the shard anew")
        changed = changed_since_listed(error.path, storage_options)
        if changed is not None:  # the index describes the object as listed, not as it is now
            return RemoteError(error.path, f"record {r} at byte offset {offset}: {changed}")
    if "length CRC mismatch" not in str(error.reason or ""):  # only a misplaced read looks like a bad header
        return error
    key = (error.path, id(index), len(index))
    with _LOCK:
        stale = _VERDICTS.get(key)
    if stale is None:
        try:
            fresh = scan_index(error.path, storage_options)
        except (CorruptRecordError, OSError):
            stale = False  # the file is damaged: the error stands
        else:
            stale = not np.array_equal(fresh, index)
        with _LOCK:
            if len(_VERDICTS) > 256:
                _VERDICTS.clear()
            _VERDICTS[key] = stale
    if not stale:
        return error
    return StaleIndexError(error.path, error.offset, error.record,
                           "no record starts there (the file scans clean from its first byte)")
