"""Remote shards held in memory, window by window, for one shuffled iteration.

A shuffled read takes its records a group at a time from anywhere in the
data set. When the shards are small, the records of a group lie close
together in each shard: requesting them one range each costs a round trip
per record, and joining near ones into one request reads the bytes between
them again for every group (hundreds of times what is used over an epoch).
So when a reader's remote shards hold at most its budget's ``windowed``
bytes together (:class:`~tfrecord_torch.io.budget.ReadBudget`), and the
reader reads a fair share of their records, each shard is fetched in
windows of about one request (the budget's ``requests.longest`` bytes; a
window: the records whose headers lie in one slice of the shard), each
window the first time one of its records is needed, and kept for the rest
of the iteration: every byte of a shard is fetched at most once per
iteration, and a record after the first of its window costs no request.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfrecord_torch.io.budget import ReadBudget
from tfrecord_torch.io.files import is_url

__all__ = ["WINDOW_SHARE", "ShardWindows", "shard_windows"]

WINDOW_SHARE = 8
"""Windows are read only when a reader reads at least 1 / WINDOW_SHARE of the
records of its remote shards (so it fetches at most about that many times
the bytes it uses); a reader with a smaller share requests its records."""


class ShardWindows:
    """The windows of some remote shards fetched so far, by shard and window.

    Args:
        paths: the shards read through windows.
        size: the bytes of the slice of a shard one window holds the
            records of (one request: the read budget's ``requests.longest``).
    """

    def __init__(self, paths: Sequence[str], size: int) -> None:
        self.paths, self.size = frozenset(paths), size
        self._held: dict[tuple[str, int], bytes] = {}
        self._bounds: dict[str, np.ndarray] = {}  # path -> [windows, 2]: each window's byte start and end

    def covers(self, path: str) -> bool:
        return path in self.paths

    def missing(self, path: str, index: np.ndarray, records: np.ndarray) -> tuple[list[int], list[int], list[int]]:
        """(windows, their byte starts, their sizes): the windows that hold
        ``records`` of ``path`` and are not fetched yet, ascending."""
        bounds = self._windows(path, index)
        wanted = np.unique(index[records, 0] // self.size).tolist()
        windows = [w for w in wanted if (path, w) not in self._held]
        return windows, [int(bounds[w, 0]) for w in windows], [int(bounds[w, 1] - bounds[w, 0]) for w in windows]

    def keep(self, path: str, windows: list[int], data: list[bytes]) -> None:
        for w, got in zip(windows, data):
            self._held[(path, w)] = got

    def frames(self, path: str, index: np.ndarray, records: np.ndarray) -> list[bytes]:
        """The frame bytes of ``records`` from the windows held (short where a
        window came back short: the frame check then names the record)."""
        bounds = self._windows(path, index)
        out = []
        for offset, size in index[records].tolist():
            w = offset // self.size
            at = offset - int(bounds[w, 0])
            out.append(self._held[(path, w)][at:at + size])
        return out

    def _windows(self, path: str, index: np.ndarray) -> np.ndarray:
        bounds = self._bounds.get(path)
        if bounds is None:
            offsets, ends = index[:, 0], index[:, 0] + index[:, 1]
            count = int(offsets[-1] // self.size) + 1 if len(index) else 0
            edges = np.arange(count + 1, dtype=np.int64) * self.size
            firsts = np.searchsorted(offsets, edges[:-1], side="left")
            lasts = np.searchsorted(offsets, edges[1:], side="left") - 1
            # a slice that holds no record's header is never asked for: its bounds are unused
            bounds = np.stack([offsets[np.minimum(firsts, len(index) - 1)],
                               ends[np.maximum(lasts, 0)]], axis=1) if count else np.zeros((0, 2), np.int64)
            self._bounds[path] = bounds
        return bounds


def shard_windows(paths: Sequence[str], indexes: Sequence[np.ndarray], reads: int, held: Sequence[bool],
                  budget: ReadBudget) -> ShardWindows | None:
    """The windows of a shuffled reader of ``reads`` records over ``paths``
    (indexed; ``held[i]``: shard ``i`` is read from a local copy), or None
    when its remote shards hold more than ``budget.windowed`` bytes or its
    share of their records is below 1 / :data:`WINDOW_SHARE`; each window one
    request of ``budget.requests.longest`` bytes."""
    remote = [i for i, path in enumerate(paths) if is_url(path) and not held[i] and len(indexes[i])]
    if not remote:
        return None
    size = sum(int(indexes[i][-1, 0] + indexes[i][-1, 1]) for i in remote)
    records = sum(len(indexes[i]) for i in remote)
    if size > budget.windowed or reads * WINDOW_SHARE < records:
        return None
    return ShardWindows([paths[i] for i in remote], budget.requests.longest)
