"""Stamps: what a local shard looked like when its index was written.

An index file (DALI's text format, kept readable by DALI and the ``tfrecord``
package) cannot say which version of its shard it describes, and a cheap
check (records tile the file; a few sampled headers) misses a shard changed
in place to the same size, for example two neighbouring records whose sizes
were swapped. So beside ``<shard>.index`` a small JSON sidecar
``<shard>.index.json`` records the shard's identity (size, modification and
change times in ns, inode) and the index's record count when the index was
written. The change time moves on any write, even one that puts the old
modification time back. An index whose
stamp matches is used as is; one without a stamp (written by another tool)
or with a stamp that does not match (the shard changed, or was copied) is
checked once against a full scan of the shard, then stamped (or rebuilt):
a changed shard never yields a wrong record, and a valid one is never
called corrupt. Remote shards need none: their cached indexes are keyed by
size and ETag. Readers never write stamps into a shard's folder: an index
checked by a scan goes into the local index cache.
"""

from __future__ import annotations

import json
import os

from tfrecord_torch.io import atomic
from tfrecord_torch.io import files as fs

__all__ = ["local_identity", "stamp_matches", "stamp_path", "write_stamp"]

_FORMAT = "tfrecord_torch index stamp 2"


def stamp_path(index_path: str) -> str:
    """Where the stamp of an index file is kept: ``<index>.json``."""
    return os.fspath(index_path) + ".json"


def local_identity(path: str) -> str:
    """A local file's identity: size, modification and change times (ns), device and inode.
    Any write to the file, or a new file under its name, gives another."""
    st = os.stat(fs.local(path))
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_dev}:{st.st_ino}"


def _facts(path: str, records: int) -> dict:
    return {"format": _FORMAT, "shard": local_identity(path), "records": records}


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
