"""Random access to the records of an indexed, uncompressed TFRecord file."""

from __future__ import annotations

import os

import numpy as np

from tfrecord_torch._types import PathLike
from tfrecord_torch.errors import CorruptRecordError
from tfrecord_torch.io import files as fs
from tfrecord_torch.io import pool
from tfrecord_torch.records.framing import parse_frame
from tfrecord_torch.records.index import check_index, load_index
from tfrecord_torch.records.shardindex import shard_index
from tfrecord_torch.records.stale import explain

__all__ = ["IndexedReader"]


class IndexedReader:
    """Read record ``i`` of a file in O(1): one positioned read of its bytes.

    Args:
        path: an uncompressed TFRecord file (a path or an fsspec URL; a remote
            record is fetched with one range request).
        index: an index file path, an int64 array [N, 2], or None for the
            shard's index as the datasets find it: an index file beside it
            (checked against the file as it is now), else the local index
            cache, else a scan of the file, kept in that cache (nothing is
            written into the file's folder).
        verify: check both CRCs of every record read.
        storage_options: fsspec options for URLs.

    The index is checked against the file (:func:`check_index`) before use.
    The file is opened on first read and reopened in a forked child, so one
    reader can be handed to DataLoader workers.
    """

    def __init__(self, path: PathLike, *, index: PathLike | np.ndarray | None = None, verify: bool = True,
                 storage_options: dict | None = None) -> None:
        self._closed = False
        self.path = os.fspath(path)
        self.verify = verify
        self._pool = pool.ReaderPool(storage_options, limit=4)
        fs.require_ranges(self.path, storage_options)  # a server ignoring Range: fail now, not per record
        if index is None:
            self.index = shard_index(self.path, storage_options=storage_options)
        else:
            index_path = "<array>"
            if not isinstance(index, np.ndarray):
                index_path = os.fspath(index)
                index = load_index(index_path, storage_options=storage_options)
            check_index(index, self.path, index_path=index_path, storage_options=storage_options)
            self.index = index

    def __len__(self) -> int:
        return len(self.index)

    def __repr__(self) -> str:
        return f"IndexedReader({self.path!r}, {len(self):,} records, verify={self.verify})"

    def __getitem__(self, i: int) -> bytes:
        if self._closed:
            raise ValueError(f"read from a closed IndexedReader ({self.path}): open a new one")
        n = len(self.index)
        if not -n <= i < n:
            raise IndexError(f"record {i} out of range for {self.path} ({n} records)")
        i %= n
        offset, size = (int(v) for v in self.index[i])
        data = self._pool.read(self.path, offset, size)
        try:
            return parse_frame(data, name=self.path, offset=offset, record=i, verify=self.verify)
        except CorruptRecordError as e:
            raise explain(e, self.index, self._pool.storage_options) from None

    def close(self) -> None:
        """Close the file. Reading afterwards is a ValueError, as reading a
        closed Python file is (and TF's random reader refuses it): a closed
        reader that quietly reopened would keep a descriptor its owner
        believes released."""
        self._closed = True
        if getattr(self, "_pool", None) is not None:
            self._pool.close()

    def __enter__(self) -> IndexedReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass
