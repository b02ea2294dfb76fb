"""A folder of cache entries kept under a size bound by dropping the least recently used.

Entries are plain files ending in one suffix; a use touches the entry's modification
time, and :meth:`LruFolder.prune` removes the oldest until the folder fits. Removing an
entry another process has open is safe on POSIX: its reader keeps the data until it
closes the file.
"""

from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["Entry", "LruFolder"]


class Entry(NamedTuple):
    """One cache entry's last use (ns since the epoch) and size in bytes."""

    used: int
    size: int


class LruFolder:
    """The entries ``*<suffix>`` of ``folder``.

    Args:
        folder: the cache folder (need not exist yet).
        suffix: the file name ending that marks an entry.
    """

    def __init__(self, folder: str, suffix: str) -> None:
        self.folder = folder
        self.suffix = suffix

    def names(self) -> list[str]:
        """The entries' file names."""
        try:
            return [n for n in os.listdir(self.folder) if n.endswith(self.suffix)]
        except FileNotFoundError:
            return []

    def entries(self) -> dict[str, Entry]:
        """Each entry's last use and size, skipping entries removed meanwhile."""
        found = {}
        for name in self.names():
            try:
                st = os.stat(os.path.join(self.folder, name))
            except FileNotFoundError:
                continue
            found[name] = Entry(st.st_mtime_ns, st.st_size)
        return found

    def usage(self) -> tuple[int, int]:
        """The number of entries and their bytes."""
        found = self.entries()
        return len(found), sum(e.size for e in found.values())

    @staticmethod
    def touch(path: str) -> None:
        """Mark an entry used now (it goes last when the cache is full)."""
        try:
            os.utime(path)
        except OSError:
            pass

    def prune(self, limit: int, keep: str | None = None) -> list[str]:
        """Drop the least recently used entries (never ``keep``) while the
        entries hold more than ``limit`` bytes; returns the removed paths."""
        found = self.entries()
        total = sum(e.size for e in found.values())
        removed = []
        for name in sorted(found, key=lambda n: found[n].used):
            if total <= limit:
                break
            path = os.path.join(self.folder, name)
            if path == keep:
                continue
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                pass
            total -= found[name].size
        return removed

    def clear(self) -> int:
        """Remove every entry; returns how many were removed."""
        removed = 0
        for name in self.names():
            try:
                os.unlink(os.path.join(self.folder, name))
                removed += 1
            except FileNotFoundError:
                pass
        return removed
