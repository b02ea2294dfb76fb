"""Finding shards and their indexes for the datasets."""

from __future__ import annotations

import hashlib
import logging
import os

import numpy as np

from tfrecord_torch.errors import IndexMismatchError, TFRecordError
from tfrecord_torch.io import files as fs
from tfrecord_torch.records.index import check_index, default_index_path, load_index, scan_index, write_index

__all__ = ["describe_shards", "expand_paths", "index_cache_dir", "shard_index"]

log = logging.getLogger(__name__)
_SKIP_SUFFIXES = (".index", ".idx", ".json", ".txt", ".partial")


def expand_paths(paths, storage_options: dict | None = None) -> list[str]:
    """Shard paths from a path, a glob pattern, a directory, or a list of these;
    local or fsspec URLs (``s3://bucket/prefix/*.tfrecord``, ``gs://bucket/dir``).

    A directory gives the files directly inside it, sorted, minus index and
    metadata files (``.index``, ``.idx``, ``.json``, ``.txt``) and hidden files.
    """
    return fs.expand(paths, storage_options, _SKIP_SUFFIXES)


def describe_shards(paths: list[str]) -> str:
    """A short description of a shard list for a repr: ``'3 shards: a-0, a-1, a-2'``."""
    names = [os.path.basename(p.rstrip("/")) or p for p in paths]
    shown = names if len(names) <= 3 else [names[0], "...", names[-1]]
    folders = {os.path.dirname(p) for p in paths}
    where = f" in {folders.pop()}" if len(folders) == 1 else ""
    return f"{len(paths)} shard{'s' if len(paths) != 1 else ''}{where}: {', '.join(shown)}"


def index_cache_dir() -> str:
    """Where indexes go when a shard's folder is read-only:
    ``$TFRECORD_TORCH_CACHE`` or ``~/.cache/tfrecord_torch/index``."""
    return os.environ.get("TFRECORD_TORCH_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "tfrecord_torch", "index")


def _cached_index_path(path: str, storage_options: dict | None) -> str:
    size, version = fs.size_and_version(path, storage_options)
    key = f"{path if fs.is_url(path) else os.path.abspath(path)}\0{size}\0{version}".encode()
    name = os.path.basename(path.rstrip("/"))[:60]
    return os.path.join(index_cache_dir(), f"{name}.{hashlib.sha256(key).hexdigest()[:20]}.index")


def shard_index(path: str, index_path: str | None = None, *, build: bool = True,
                storage_options: dict | None = None) -> np.ndarray:
    """The checked index of an uncompressed shard.

    Uses ``index_path`` if given (it must match: a mismatch is an error), else
    ``<path>.index`` or a cached index, rebuilding either when it does not match
    the shard. New indexes are written beside a local shard, or in the cache
    folder when its folder is read-only or the shard is remote. The cache key
    includes the file's size and modification time (an object's ETag), so an
    index of a changed file is never reused.
    """
    so = storage_options
    if index_path is not None:
        index = load_index(index_path, storage_options=so)
        check_index(index, path, index_path=index_path, storage_options=so)
        return index
    cached = _cached_index_path(path, so)
    candidates = [default_index_path(path), cached]
    for candidate in candidates:
        if fs.exists(candidate, so if candidate != cached else None):
            try:
                index = load_index(candidate, storage_options=so if candidate != cached else None)
                check_index(index, path, index_path=candidate, storage_options=so)
                return index
            except IndexMismatchError as e:
                log.warning("rebuilding a stale index: %s", e)
    if not build:
        raise TFRecordError(f"{path}: no index (build one with `tfrecord-torch index`)")
    index = scan_index(path, so)
    for candidate in ([cached] if fs.is_url(path) else candidates):
        try:
            os.makedirs(os.path.dirname(candidate), exist_ok=True)
            write_index(index, candidate)
            log.info("built index %s", candidate)
            break
        except OSError as e:
            log.debug("cannot write index %s: %s", candidate, e)
    return index
