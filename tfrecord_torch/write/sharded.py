"""Sharded writing, with TFDS shard names and an index per shard."""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
import warnings
from typing import cast

from tfrecord_torch._args import check_int
from tfrecord_torch._types import Bytes, CompressionArg, PathLike
from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.io import atomic, listing
from tfrecord_torch.io import files as fs
from tfrecord_torch.records.compression import (
    CompressionOptions,
    check_compression,
    check_compression_options,
)
from tfrecord_torch.records.index import INDEX_FOLDER, default_index_path, writer_index_path
from tfrecord_torch.records.stamp import stamp_path, write_stamp
from tfrecord_torch.records.writer import RecordWriter
from tfrecord_torch.tfds.layout import SAFE_NAME, shard_name

__all__ = ["ShardedWriter", "shard_name"]

log = logging.getLogger(__name__)


class ShardedWriter:
    """Write records into shards that roll over by record count or size.

    Each shard is written (with its index, unless compressed) under a hidden
    staging name. Only :meth:`close` gives the shards their final TFDS names,
    once the number of shards is known and every one is complete; before that,
    a reader of the folder sees none of them, and an interrupted or failed run
    leaves no file that looks finished (staged files of an earlier killed run
    are removed when the next one starts). A lock file makes a second writer
    of the same ``name``/``split`` in the same folder fail at once.

    For a URL (``s3://bucket/prefix``) the shards are staged in a local
    temporary folder and uploaded when all are complete, each object
    appearing whole (no lock: object stores have none).

    Args:
        output_dir: folder or URL prefix to write into (created if needed).
        name: the dataset's name, as in TFDS.
        split: the split's name, as in TFDS.
        max_records: records per shard (default 10,000 if no limit is given).
        max_bytes: bytes per shard (framed, before compression).
        compression: None, "gzip" or "zlib".
        compression_options: how to deflate compressed shards (level, window,
            memory level, as TF's ``TFRecordOptions``); None gives TF's defaults.
        storage_options: fsspec options for a URL.
    """

    def __init__(self, output_dir: PathLike, *, name: str, split: str = "train", max_records: int | None = None,
                 max_bytes: int | None = None, compression: CompressionArg = None,
                 compression_options: CompressionOptions | None = None, storage_options: dict | None = None) -> None:
        for arg, text in (("name", name), ("split", split)):
            if not isinstance(text, str) or not SAFE_NAME.fullmatch(text) or text.startswith("."):
                raise ValueError(f"{arg} must be letters, digits, '_' and '.' (not first), "
                                 f"as TFDS names are; got {text!r}")
        check_int("max_records", max_records, minimum=1, optional=True)
        check_int("max_bytes", max_bytes, minimum=1, optional=True)
        if max_records is None and max_bytes is None:
            max_records = 10_000
        self.output_dir = os.fspath(output_dir)
        self.name, self.split = name, split
        self.max_records, self.max_bytes = max_records, max_bytes
        self.compression = compression
        # a bad pair fails here, at once, rather than at the first record
        check_compression_options(check_compression(compression, allow_auto=False), compression_options)
        self.compression_options = compression_options
        self.storage_options = storage_options
        self.remote = fs.is_url(self.output_dir)
        if self.remote:  # stage locally; upload each shard whole when all are done
            self._staging = tempfile.mkdtemp(prefix=f"tfrecord_torch-{name}-{split}-")
            self._lock = None
        else:
            self.output_dir = fs.local(self.output_dir)
            os.makedirs(self.output_dir, exist_ok=True)
            self._staging = self.output_dir
            self._lock = _lock(os.path.join(self.output_dir, f".{name}-{split}.lock"))
        self._remove_staged()
        self.shard_lengths: list[int] = []
        self.num_bytes = 0
        self.paths: list[str] = []
        self._staged: list[str] = []
        self._writer: RecordWriter | None = None
        self._closed = False

    def _remove_staged(self) -> None:
        """Remove staged shards, their indexes and their writers' temporary files (``..name``)."""
        for dots in (".", ".."):
            pattern = f"{dots}{glob.escape(self.name)}-{glob.escape(self.split)}.tfrecord-*.staged*"
            for path in glob.glob(os.path.join(glob.escape(self._staging), pattern)):
                os.unlink(path)

    def __repr__(self) -> str:
        shards = len(self.shard_lengths) + (self._writer is not None)
        records = sum(self.shard_lengths) + (self._writer.records if self._writer is not None else 0)
        state = "closed" if self._closed else "open"
        return (f"ShardedWriter({self.output_dir!r}, name={self.name!r}, split={self.split!r}, "
                f"shards={shards}, records={records}, {state})")

    def write(self, payload: Bytes) -> None:
        """Append one record, starting a new shard when the current one is full."""
        if self._closed:
            raise ValueError("write to a closed ShardedWriter")
        w = self._writer
        if w is not None and ((self.max_records and w.records >= self.max_records) or
                              (self.max_bytes and w.offset + len(payload) + 16 > self.max_bytes
                               and w.records)):
            self._finish_shard()
            w = None
        if w is None:
            path = os.path.join(self._staging, f".{self.name}-{self.split}.tfrecord-"
                                               f"{len(self._staged):05d}.staged")
            w = self._writer = RecordWriter(path, compression=self.compression,  # a hidden index beside it
                                            compression_options=self.compression_options,
                                            index=self.compression is None and default_index_path(path))
            self._staged.append(path)
        w.write(payload)

    def _finish_shard(self) -> None:
        w, self._writer = cast(RecordWriter, self._writer), None
        w.close()
        self.shard_lengths.append(w.records)
        self.num_bytes += os.path.getsize(cast(str, w.path))

    def close(self) -> list[str]:
        """Finish the last shard and move every shard to its final name.

        Returns:
            The final shard paths. Shards of an earlier run with the same name
            and split are replaced.
        """
        if self._closed:
            return self.paths
        try:
            if self._writer is not None:
                self._finish_shard()
            if not self._staged:  # an empty split still gets one (empty) shard, as in TFDS
                empty = os.path.join(self._staging, f".{self.name}-{self.split}.tfrecord-00000.staged")
                RecordWriter(empty, index=self.compression is None and default_index_path(empty),
                             compression=self.compression, compression_options=self.compression_options).close()
                self._staged.append(empty)
                self.shard_lengths.append(0)
            n = len(self._staged)
        except BaseException:
            self.abort()
            raise
        # From here on the new shards replace the old ones: first every new
        # shard takes its name (replacing a same-named old one atomically),
        # then old shards of other names go. A failure part way leaves the
        # staged rest for the next run to clean up, never a missing dataset.
        self._closed = True
        try:
            if self.remote:
                self._upload(n)
            else:
                for i, staged in enumerate(self._staged):
                    final = os.path.join(self.output_dir, shard_name(self.name, self.split, i, n,
                                                                     self.compression))
                    index = default_index_path(staged)
                    if os.path.exists(index):
                        os.makedirs(os.path.dirname(writer_index_path(final)), exist_ok=True)
                        os.replace(index, writer_index_path(final))
                        if os.path.exists(stamp_path(index)):
                            os.unlink(stamp_path(index))
                    os.replace(staged, final)
                    if os.path.exists(writer_index_path(final)):  # the stamp of the file as renamed
                        write_stamp(final, writer_index_path(final), self.shard_lengths[i])
                    self.paths.append(final)
                atomic.fsync_dir(self.output_dir)
            self._remove_stale()
        finally:
            self._release()
        return self.paths

    def _stale(self) -> list[str]:
        """Shards and indexes of this name/split from an earlier run."""
        pattern = f"{glob.escape(self.name)}-{glob.escape(self.split)}.tfrecord-*"
        keep = set(self.paths) | {writer_index_path(p) for p in self.paths} | \
            {stamp_path(writer_index_path(p)) for p in self.paths}
        found = []
        base = self.output_dir.rstrip("/")
        for folder in (base, f"{base}/{INDEX_FOLDER}" if self.remote else os.path.join(base, INDEX_FOLDER)):
            try:
                if self.remote:
                    found += listing.expand(f"{folder}/{pattern}", self.storage_options, ())
                else:
                    found += glob.glob(os.path.join(glob.escape(folder), pattern))
            except FileNotFoundError:
                continue
        return [p for p in found if p not in keep]

    def _remove_stale(self) -> None:
        try:
            stale = self._stale()
        except FileNotFoundError:
            return
        for path in stale:
            if self.remote:
                atomic.remove(path, self.storage_options)
            else:
                os.unlink(path)

    def _upload(self, n: int) -> None:
        """Upload every staged shard (index first), each object appearing whole."""
        base = self.output_dir.rstrip("/")
        for i, staged in enumerate(self._staged):
            final = f"{base}/{shard_name(self.name, self.split, i, n, self.compression)}"
            if os.path.exists(default_index_path(staged)):
                atomic.upload(default_index_path(staged), writer_index_path(final), self.storage_options)
            atomic.upload(staged, final, self.storage_options)
            self.paths.append(final)
        shutil.rmtree(self._staging, ignore_errors=True)

    def abort(self) -> None:
        """Stop and remove every staged file."""
        self._closed = True
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        self._remove_staged()
        if self.remote:
            shutil.rmtree(self._staging, ignore_errors=True)
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            atomic.unlock(os.path.join(self.output_dir, f".{self.name}-{self.split}.lock"), self._lock)
            self._lock = None

    def __del__(self) -> None:
        # Dropped without close(): nothing is published; staged files go.
        if not getattr(self, "_closed", True):
            warnings.warn(f"ShardedWriter({self.output_dir!r}, name={self.name!r}) was dropped without "
                          "close(): its staged shards are removed, nothing is published",
                          ResourceWarning, stacklevel=2)
            try:
                self.abort()
            except Exception:  # interpreter shutdown
                pass

    def __enter__(self) -> ShardedWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _lock(path: str) -> int:
    fd = atomic.lock_file(path, wait=False)
    if fd is None:
        raise TFRecordError(f"another process is writing {os.path.basename(path)[1:-5]} into "
                            f"{os.path.dirname(path)} (lock {path} is held)")
    return fd

