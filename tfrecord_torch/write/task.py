"""One shard, written by one task, in whichever process or machine runs it.

:func:`write_shard` gets a frozen, picklable :class:`ShardTask` (the shard's
spec, the plan's order parameters, the encoding options and a recipe for the
source), encodes the shard's samples, and publishes the shard atomically:

1. the records go to a temporary file (a hidden ``.<shard>.<random>.partial``
   beside the shard for a local folder, a local temporary file for a URL);
2. the index is written under its final name;
3. the shard takes its final name: a rename, or for a URL one upload, which
   an object store makes visible only once complete;
4. a completion marker ``.shard_markers/<shard>.done`` records the shard's length,
   size and image summary, which lets a rerun skip it and the commit step
   write the metadata without reading the shard. The commit removes the markers:
   a finished conversion leaves shards, their indexes (``index/``) and metadata.

A task that fails or is killed at any point leaves at most a hidden partial
file (removed at commit) and never a final-named partial shard; a task that
runs twice writes the same bytes twice.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfrecord_torch.io import atomic
from tfrecord_torch.io import files as fs
from tfrecord_torch.records.compression import CompressionOptions
from tfrecord_torch.records.index import write_index, writer_index_path
from tfrecord_torch.records.stamp import write_stamp
from tfrecord_torch.records.writer import RecordWriter
from tfrecord_torch.write.encode import encode_sample, file_samples
from tfrecord_torch.write.plan import ShardSpec, write_order
from tfrecord_torch.write.source import DatasetSource
from tfrecord_torch.write.stats import ImageStats

__all__ = ["MARKER_FOLDER", "ShardResult", "ShardTask", "marker_path", "use_dataset", "write_shard"]

MARKER_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class ShardTask:
    """Everything one shard's task needs (picklable), built by keyword only:
    ten fields in a row are too easy to put in the wrong order.

    Attributes:
        spec: the shard.
        length, seed, shuffle: the plan's write order.
        compression: None or "gzip".
        compression_options: how a compressed shard is deflated (None: TensorFlow's defaults).
        options: encoding options (``format``, ``quality``, ``class_names``).
        fingerprint: the plan's identity, kept in the completion marker.
        files_digest: for a source copied file by file, a digest of its
            (path, label) list, checked against the rebuilt source.
        source: a recipe for the source, or None for the dataset this process
            was given (:func:`use_dataset`: the serial path and forked pools).
        storage_options: fsspec options for a URL.
        attempt: 0 for the first try; a retry is a new, distinct task.
    """

    spec: ShardSpec
    length: int
    seed: int
    shuffle: bool
    compression: str | None
    options: dict
    fingerprint: str
    files_digest: str | None
    source: DatasetSource | None
    storage_options: dict | None = None
    compression_options: CompressionOptions | None = None
    attempt: int = 0


@dataclass(frozen=True)
class ShardResult:
    """A finished shard: its index, records, bytes on disk and image summary (JSON)."""

    index: int
    records: int
    size: int
    stats: dict

    def marker(self, fingerprint: str) -> bytes:
        return json.dumps({"version": MARKER_VERSION, "fingerprint": fingerprint, "index": self.index,
                           "records": self.records, "size": self.size, "stats": self.stats},
                          sort_keys=True).encode("utf-8")


MARKER_FOLDER = ".shard_markers"  # hidden, and no glob for shards (*.tfrecord*) matches it


def marker_path(shard_path: str) -> str:
    """The completion marker of a shard: ``<folder>/.shard_markers/<shard>.done``."""
    if fs.is_url(shard_path):
        folder, base = shard_path.rsplit("/", 1)
        return f"{folder}/{MARKER_FOLDER}/{base}.done"
    folder, base = os.path.split(shard_path)
    return os.path.join(folder, MARKER_FOLDER, f"{base}.done")


_given: dict[str, Any] = {}
_given_lock = threading.Lock()


def use_dataset(dataset: Any) -> None:
    """Make ``dataset`` the one tasks without a recipe read (None forgets it).
    Used in this process for a serial run, and as a forked pool's initializer."""
    with _given_lock:
        _given.clear()
        if dataset is not None:
            _given["dataset"] = dataset
            _given["files"] = file_samples(dataset)


def _dataset(task: ShardTask) -> tuple[Any, list | None]:
    if task.source is None:
        with _given_lock:
            if "dataset" not in _given:
                raise RuntimeError("a shard task without a source recipe ran in a process that was given no "
                                   "dataset; pass a DatasetSource (or a torchvision dataset) with executor=")
            return _given["dataset"], _given["files"]
    dataset = task.source.build()
    files = _cached_files(dataset)
    n = len(dataset)
    if n != task.length:
        raise ValueError(f"the source rebuilt from {task.source!r} has {n} samples where the plan has "
                         f"{task.length}: the recipe does not rebuild the dataset that was planned")
    if task.files_digest is not None and (files is None or files_digest(files) != task.files_digest):
        raise ValueError(f"the source rebuilt from {task.source!r} lists other files than the planned one "
                         "(another folder, or files added or removed since)")
    return dataset, files


_files_cache: dict[int, tuple[Any, list | None]] = {}


def _cached_files(dataset: Any) -> list | None:
    hit = _files_cache.get(id(dataset))
    if hit is None or hit[0] is not dataset:
        _files_cache.clear()
        hit = _files_cache[id(dataset)] = (dataset, file_samples(dataset))
    return hit[1]


def files_digest(files: list[tuple[str, int]]) -> str:
    """A digest of a (path, label) list."""
    import hashlib

    h = hashlib.sha256()
    for path, label in files:
        h.update(f"{path}\0{label}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def write_shard(task: ShardTask) -> ShardResult:
    """Write one shard and publish it (see the module's docstring).

    Returns:
        The finished shard's result.

    Raises:
        TypeError: a sample cannot be converted (the message names its source index).
        ValueError: the rebuilt source differs from the planned one.
    """
    spec, so = task.spec, task.storage_options
    dataset, files = _dataset(task)
    sources = write_order(task.length, seed=task.seed, shuffle=task.shuffle)[spec.start:spec.stop]
    remote = fs.is_url(spec.path)
    folder = None if remote else os.path.dirname(spec.path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    fd, temp = atomic.create_temp(folder, os.path.basename(spec.path))
    stats = ImageStats()
    try:
        with os.fdopen(fd, "wb") as f:
            writer = RecordWriter(f, compression=task.compression, compression_options=task.compression_options)
            sizes = []
            for i in sources.tolist():
                payload, meta = encode_sample(i, dataset, files, task.options)
                writer.write(payload)
                sizes.append(len(payload) + 16)
                stats.add(meta)
            writer.close()
            f.flush()
            os.fsync(f.fileno())
        size = os.path.getsize(temp)
        if task.compression is None:
            lengths = np.array(sizes, np.int64)
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(sizes) else lengths
            if not remote:
                os.makedirs(os.path.dirname(writer_index_path(spec.path)), exist_ok=True)
            write_index(np.stack([offsets, lengths], axis=1).reshape(-1, 2), writer_index_path(spec.path),
                        storage_options=so)
        if remote:
            atomic.upload(temp, spec.path, so)
            os.unlink(temp)
        else:
            os.replace(temp, spec.path)
            atomic.fsync_dir(os.path.dirname(spec.path))
            if task.compression is None:  # the index describes the shard as published: no scan at first read
                write_stamp(spec.path, writer_index_path(spec.path), len(sizes))
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    result = ShardResult(spec.index, len(sizes), size, stats.to_json())
    if not remote:
        os.makedirs(os.path.dirname(marker_path(spec.path)), exist_ok=True)
    atomic.write_bytes(marker_path(spec.path), result.marker(task.fingerprint), so)
    return result

