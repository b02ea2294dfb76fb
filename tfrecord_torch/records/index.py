"""Index files: one ``"{offset} {framed_size}\\n"`` line per record.

This is the format of NVIDIA DALI's ``tfrecord2idx`` and of the ``tfrecord``
package, so their index files load here and ours load there. ``framed_size``
counts the 16 framing bytes. Only uncompressed files can be indexed: offsets
into a GZIP/ZLIB stream cannot be seeked to. To get random access to a
compressed file, decompress it once (``tfrecord-torch decompress``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from tfrecord_torch._types import PathLike
from tfrecord_torch.errors import CorruptRecordError, IndexMismatchError, TFRecordError
from tfrecord_torch.io import files as fs
from tfrecord_torch.io import pool
from tfrecord_torch.policy import OnError, as_policy
from tfrecord_torch.records.crc import masked_crc32c
from tfrecord_torch.records.framing import HEADER, OVERHEAD, iter_chunks
from tfrecord_torch.records.indexfile import parse_index_text, read_index_file, write_index_file
from tfrecord_torch.records.stamp import write_stamp
from tfrecord_torch.records.streams import open_stream

__all__ = ["INDEX_FOLDER", "build_index", "check_index", "default_index_path", "load_index", "parse_index",
           "scan_index", "writer_index_path"]

_SAMPLES = 8  # record headers read to check an index against its file


INDEX_FOLDER = "index"  # <folder>/index/<shard>.index: no glob over the shards' names matches it


def default_index_path(path) -> str:
    """Where DALI's ``tfrecord2idx``, the ``tfrecord`` package and ``tfrecord-torch index``
    keep an index: beside the file, ``<path>.index``."""
    return os.fspath(path) + ".index"


def writer_index_path(path) -> str:
    """Where this library's writers keep a file's index: ``<folder>/index/<file>.index``,
    out of every glob over the files' names (``name-train*``, ``*.tfrecord*``, ``*-of-*``),
    so that ``tf.data`` over such a glob reads records only."""
    path = os.fspath(path)
    if fs.is_url(path):
        folder, base = path.rsplit("/", 1)
        return f"{folder}/{INDEX_FOLDER}/{base}.index"
    folder, base = os.path.split(path)
    return os.path.join(folder, INDEX_FOLDER, base + ".index")


def scan_index(path, storage_options: dict | None = None, progress=None, report=None) -> np.ndarray:
    """Read a record file once and return its index (int64 array [N, 2]) in memory.

    ``progress``, if given, is called with the number of bytes read after each block.
    Without ``report`` a corrupt record raises :class:`CorruptRecordError`. With it
    (an ``on_error`` policy's reporter), a record whose payload CRC fails stays
    in the index (its frame is sound; the reader reports it when it reads it),
    and a bad length or a truncation ends the index there: the records before
    it are kept and ``report`` is told how many bytes after it are lost.
    """
    stream = open_stream(path, "auto", storage_options)
    rows = _Rows()
    with stream:
        if stream.compression is not None:
            raise TFRecordError(
                f"{stream.name}: cannot index a {stream.compression}-compressed file: offsets in "
                "a compressed stream cannot be seeked to. Stream it with read_records(), or "
                "decompress it once (tfrecord-torch decompress IN OUT) and index the result.")
        errors: list[CorruptRecordError] = []
        for c in iter_chunks(stream, verify=True, report=None if report is None else errors.append):
            rows.add(c.offsets, c.lengths + OVERHEAD)
            if progress is not None:
                progress(int(c.lengths.sum()) + OVERHEAD * len(c))
        size = stream.size
    if not errors:
        return rows.finish()
    # Bad payloads were skipped by the scan: put their frames back (records
    # tile the file up to where the scan stopped, if it stopped).
    bad = [e for e in errors if str(e.reason).startswith("payload CRC")]
    stops = [e for e in errors if not str(e.reason).startswith("payload CRC")]
    index = rows.finish()
    end = stops[0].offset if stops else (size or 0)
    if bad:
        offsets = np.sort(np.concatenate([index[:, 0], np.array([e.offset for e in bad], np.int64)]))
        index = np.stack([offsets, np.diff(np.append(offsets, end))], axis=1)
    for e in stops:
        lost = "" if size is None else f"; the {size - e.offset} bytes after it are lost"
        report(CorruptRecordError(e.path, e.offset, e.record,
                                  f"{e.reason}: the index ends before it{lost} (records lost)"))
    return index


class _Rows:
    """Index rows gathered a chunk at a time into one growing int64 array."""

    def __init__(self) -> None:
        self.flat = np.empty(1 << 17, np.int64)  # owns its data, so it can grow by realloc
        self.n = 0

    def add(self, offsets: np.ndarray, sizes: np.ndarray) -> None:
        need = self.n + len(offsets)
        if 2 * need > len(self.flat):  # realloc: large blocks grow in place, no double peak
            self.flat.resize(max(2 * need, 2 * len(self.flat)), refcheck=False)
        self.flat[2 * self.n:2 * need:2] = offsets
        self.flat[2 * self.n + 1:2 * need:2] = sizes
        self.n = need

    def finish(self) -> np.ndarray:
        self.flat.resize(2 * self.n, refcheck=False)
        return self.flat.reshape(-1, 2)


def build_index(path: PathLike, index_path: PathLike | None = None, *, storage_options: dict | None = None,
                progress: Callable[[int], object] | None = None, on_error: OnError = "raise") -> str:
    """Write the index file of a record file, checking every CRC on the way.

    Args:
        path: an uncompressed TFRecord file.
        index_path: where to write; defaults to ``<path>.index``.
        progress: called with the number of bytes read after each block (a progress bar's update).
        on_error: "raise", or "skip"/"warn"/a policy: a record with a bad payload
            is indexed (readers report it), and a bad length ends the index, its
            loss reported (see :func:`scan_index`).

    Returns:
        The index file's path. It is written under a temporary name and renamed
        when complete.
    """
    index = scan_index(path, storage_options, progress, as_policy(on_error).reporter())
    index_path = default_index_path(path) if index_path is None else os.fspath(index_path)
    write_index(index, index_path, storage_options=storage_options)
    write_stamp(os.fspath(path), index_path, len(index))
    return index_path


def write_index(index: np.ndarray, index_path, *, storage_options: dict | None = None) -> None:
    """Write an index array [N, 2] as an index file (atomically; a URL is uploaded whole)."""
    write_index_file(index, os.fspath(index_path), storage_options=storage_options)


def load_index(index_path: PathLike, *, storage_options: dict | None = None) -> np.ndarray:
    """Load an index file (any whitespace between numbers: see :mod:`~tfrecord_torch.records.indexfile`).

    Returns:
        int64 array [N, 2]: each record's byte offset and framed size.

    Raises:
        IndexMismatchError: the file is not a well-formed index.
    """
    return read_index_file(os.fspath(index_path), storage_options)


def parse_index(text: bytes, index_path: str = "<index>") -> np.ndarray:
    """An index file's contents as an int64 array [N, 2] (see :func:`load_index`).

    Raises:
        IndexMismatchError: ``text`` is not a well-formed index.
    """
    return parse_index_text(text, index_path)


def check_index(index: np.ndarray, path: PathLike, *, index_path: PathLike = "<index>", size: int | None = None,
                samples: int = _SAMPLES, storage_options: dict | None = None) -> None:
    """Check cheaply that ``index`` describes the record file ``path``.

    The records must tile the file (first at 0, each next one where the
    previous ends, the last ending at the file's size), and the headers at a
    few evenly spaced records must hold the indexed sizes (a header whose own
    CRC fails is skipped as corrupt data, but at least one must be valid).

    Raises:
        IndexMismatchError: naming both files and the first disagreement.
    """
    path = os.fspath(path)
    size = fs.size_and_version(path, storage_options)[0] if size is None else size
    fail = lambda reason: IndexMismatchError(os.fspath(index_path), path, reason)  # noqa: E731
    if index.ndim != 2 or index.shape[1] != 2:
        raise fail(f"expected an array [N, 2], got shape {index.shape}")
    if len(index) == 0:
        if size:
            raise fail(f"the index lists no records but the file holds {size} bytes")
        return
    offsets, sizes = index[:, 0], index[:, 1]
    if offsets[0] != 0:
        raise fail(f"the first record is at byte {offsets[0]}, not 0")
    if (sizes < OVERHEAD).any():
        i = int(np.flatnonzero(sizes < OVERHEAD)[0])
        raise fail(f"record {i} has size {sizes[i]}, less than the 16 framing bytes")
    gaps = np.flatnonzero(offsets[1:] != offsets[:-1] + sizes[:-1])
    if len(gaps):
        i = int(gaps[0]) + 1
        raise fail(f"record {i} is at byte {offsets[i]}, but record {i - 1} ends at "
                   f"{offsets[i - 1] + sizes[i - 1]}")
    end = int(offsets[-1] + sizes[-1])
    if end != size:
        raise fail(f"the records end at byte {end} but the file holds {size} bytes "
                   "(was the file changed after it was indexed?)")
    if samples <= 0:  # the caller checks the headers as it reads them
        return
    # Sampled headers: a valid header with another length, or no valid header
    # at all, means the index is not this file's. A header whose CRC fails is
    # corrupt data, left for the reader to report (an index helps read past it).
    picks = np.unique(np.linspace(0, len(index) - 1, min(samples, len(index))).astype(np.int64))
    valid = 0
    reader = pool.Reader(path, storage_options)
    try:
        heads = [reader.read(int(offsets[i]), HEADER.size) for i in picks.tolist()]
    finally:
        reader.close()
    for i, head in zip(picks.tolist(), heads):
        if len(head) != HEADER.size:  # the file shrank since its size was taken
            raise fail(f"record {i} at byte {offsets[i]} is past the end of the file")
        length, length_crc = HEADER.unpack(head)
        if masked_crc32c(head[:8]) != length_crc:
            continue
        if length + OVERHEAD != sizes[i]:
            raise fail(f"record {i} at byte {offsets[i]} does not start with a valid "
                       f"header of a {sizes[i] - OVERHEAD}-byte record")
        valid += 1
    if not valid:
        raise fail(f"none of the {len(picks)} sampled records starts with a valid header")
