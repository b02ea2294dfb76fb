"""Stamps: what a local shard looked like when its index was written.

An index file (DALI's text format, kept readable by DALI and the ``tfrecord``
package) cannot say which version of its shard it describes, and a cheap
check (records tile the file; a few sampled headers) misses a shard changed
in place to the same size, for example two neighbouring records whose sizes
were swapped. So beside ``<shard>.index`` a small JSON sidecar
``<shard>.index.json`` records the shard's size and modification time (ns)
and the index's record count when the index was written. An index whose
stamp matches is used as is; one without a stamp (written by another tool)
or with a stamp that does not match (the shard changed, or was copied) is
checked once against a full scan of the shard, then stamped (or rebuilt):
a changed shard never yields a wrong record, and a valid one is never
called corrupt. Remote shards need none: their cached indexes are keyed by
size and ETag.
"""

from __future__ import annotations

import json
import os

from tfrecord_torch.io import atomic
from tfrecord_torch.io import files as fs

__all__ = ["stamp_matches", "stamp_path", "write_stamp"]

_FORMAT = "tfrecord_torch index stamp 1"


def stamp_path(index_path: str) -> str:
    """Where the stamp of an index file is kept: ``<index>.json``."""
    return os.fspath(index_path) + ".json"


def _facts(path: str, records: int) -> dict:
    st = os.stat(fs.local(path))
    return {"format": _FORMAT, "shard_size": st.st_size, "shard_mtime_ns": st.st_mtime_ns, "records": records}


def write_stamp(path: str, index_path: str, records: int) -> None:
    """Stamp a local index as describing ``path`` as it is now (no-op for URLs;
    a read-only folder is left unstamped)."""
    if fs.is_url(path) or fs.is_url(index_path):
        return
    try:
        atomic.write_bytes(stamp_path(index_path), json.dumps(_facts(path, records)).encode())
    except OSError:
        pass


def stamp_matches(path: str, index_path: str, records: int) -> bool:
    """True if the index's stamp says it was written for ``path`` as it is now."""
    if fs.is_url(path) or fs.is_url(index_path):
        return True
    try:
        with open(stamp_path(index_path), "rb") as f:
            stamp = json.loads(f.read(4096))
        return bool(stamp == _facts(path, records))
    except (OSError, ValueError):
        return False
