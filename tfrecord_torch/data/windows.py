"""Remote shards held in memory, window by window, for one shuffled iteration.

A shuffled read takes its records a group at a time from anywhere in the
data set. When the shards are small, the records of a group lie close
together in each shard: requesting them one range each costs a round trip
per record, and joining near ones into one request reads the bytes between
them again for every group (hundreds of times what is used over an epoch).
So when a reader's remote shards hold at most :data:`WINDOW_BYTES` together,
and the reader reads a fair share of their records, each shard is fetched in
windows of about :data:`~tfrecord_torch.io.ranges.MAX_REQUEST` bytes (a
window: the records whose headers lie in one slice of the shard), each
window the first time one of its records is needed, and kept for the rest
of the iteration: every byte of a shard is fetched at most once per
iteration, and a record after the first of its window costs no request.
A window is checked by one scan when it comes (its payloads kept); a record
the scan did not vouch for (a bad CRC, a length that ends the scan, a
record the index places elsewhere) is left to the usual check when its turn
comes, which raises or reports it with its location.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfrecord_torch.errors import CorruptRecordError
from tfrecord_torch.io import ranges
from tfrecord_torch.io.files import is_url
from tfrecord_torch.records.framing import OVERHEAD, iter_chunks
from tfrecord_torch.records.streams import open_bytes

__all__ = ["WINDOW_BYTES", "WINDOW_SHARE", "ShardWindows", "shard_windows"]

WINDOW_BYTES = 64 << 20
"""The most bytes of remote shards one reader holds in memory as windows."""

WINDOW_SHARE = 8
"""Windows are read only when a reader reads at least 1 / WINDOW_SHARE of the
records of its remote shards (so it fetches at most about that many times
the bytes it uses); a reader with a smaller share requests its records."""


class ShardWindows:
    """The windows of some remote shards fetched so far, by shard and window.

    Args:
        paths: the shards read through windows.
    """

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = frozenset(paths)
        self._held: dict[tuple[str, int], bytes] = {}
        self._checked: dict[tuple[str, int], list] = {}  # each record's payload from the window's scan, or None
        self._bounds: dict[str, np.ndarray] = {}  # path -> [windows, 2]: each window's byte start and end
        self._firsts: dict[str, np.ndarray] = {}  # path -> each window's first record

    def covers(self, path: str) -> bool:
        return path in self.paths

    def missing(self, path: str, index: np.ndarray, records: np.ndarray) -> tuple[list[int], list[int], list[int]]:
        """(windows, their byte starts, their sizes): the windows that hold
        ``records`` of ``path`` and are not fetched yet, ascending."""
        bounds = self._windows(path, index)
        wanted = np.unique(index[records, 0] // ranges.MAX_REQUEST).tolist()
        windows = [w for w in wanted if (path, w) not in self._checked]
        return windows, [int(bounds[w, 0]) for w in windows], [int(bounds[w, 1] - bounds[w, 0]) for w in windows]

    def keep(self, path: str, index: np.ndarray, windows: list[int], data: list[bytes], verify: bool) -> None:
        """Hold the fetched ``windows`` of ``path``, each checked by one scan."""
        bounds, firsts = self._windows(path, index), self._firsts[path]
        for w, got in zip(windows, data):
            first = int(firsts[w])
            count = (int(firsts[w + 1]) if w + 1 < len(firsts) else len(index)) - first
            checked: list = [None] * count
            try:  # a bad record is left out of ``checked`` (reported to no one): checked again in its turn
                for chunk in iter_chunks(open_bytes(got, path), verify=verify, offset=int(bounds[w, 0]),
                                         record=first, payloads=True, block_size=max(len(got), 1),
                                         report=lambda error: None):
                    for number, offset, length, payload in zip(chunk.numbers.tolist(), chunk.offsets.tolist(),
                                                               chunk.lengths.tolist(), chunk.payloads()):
                        if number - first < count and index[number].tolist() == [offset, length + OVERHEAD]:
                            checked[number - first] = payload
            except CorruptRecordError:
                pass
            self._checked[(path, w)] = checked
            if None in checked:  # the bytes of the records left to the usual check
                self._held[(path, w)] = got

    def payloads(self, path: str, index: np.ndarray, records: np.ndarray) -> list[bytes | None]:
        """The checked payloads of ``records`` (held windows), None where the
        window's scan did not vouch for the record."""
        firsts = self._firsts[path]
        out = []
        for r, offset in zip(records.tolist(), index[records, 0].tolist()):
            w = offset // ranges.MAX_REQUEST
            out.append(self._checked[(path, w)][r - int(firsts[w])])
        return out

    def frame(self, path: str, index: np.ndarray, r: int) -> bytes:
        """The frame bytes of record ``r`` from its window (short where the
        window came back short: the frame check then names the record)."""
        offset, size = index[r].tolist()
        w = offset // ranges.MAX_REQUEST
        at = offset - int(self._bounds[path][w, 0])
        return self._held[(path, w)][at:at + size]

    def _windows(self, path: str, index: np.ndarray) -> np.ndarray:
        bounds = self._bounds.get(path)
        if bounds is None:
            offsets, ends = index[:, 0], index[:, 0] + index[:, 1]
            count = int(offsets[-1] // ranges.MAX_REQUEST) + 1 if len(index) else 0
            edges = np.arange(count + 1, dtype=np.int64) * ranges.MAX_REQUEST
            firsts = np.searchsorted(offsets, edges[:-1], side="left")
            lasts = np.searchsorted(offsets, edges[1:], side="left") - 1
            # a slice that holds no record's header is never asked for: its bounds are unused
            bounds = np.stack([offsets[np.minimum(firsts, len(index) - 1)],
                               ends[np.maximum(lasts, 0)]], axis=1) if count else np.zeros((0, 2), np.int64)
            self._bounds[path], self._firsts[path] = bounds, firsts
        return bounds


def shard_windows(paths: Sequence[str], indexes: Sequence[np.ndarray], reads: int, held: Sequence[bool]
                  ) -> ShardWindows | None:
    """The windows of a shuffled reader of ``reads`` records over ``paths``
    (indexed; ``held[i]``: shard ``i`` is read from a local copy), or None
    when its remote shards hold more than :data:`WINDOW_BYTES` or its share of
    their records is below 1 / :data:`WINDOW_SHARE`."""
    remote = [i for i, path in enumerate(paths) if is_url(path) and not held[i] and len(indexes[i])]
    if not remote:
        return None
    size = sum(int(indexes[i][-1, 0] + indexes[i][-1, 1]) for i in remote)
    records = sum(len(indexes[i]) for i in remote)
    if size > WINDOW_BYTES or reads * WINDOW_SHARE < records:
        return None
    return ShardWindows([paths[i] for i in remote])
