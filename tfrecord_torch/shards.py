"""Finding shards and their indexes for the datasets."""

from __future__ import annotations

import glob
import hashlib
import logging
import os

import numpy as np

from .errors import IndexMismatchError, TFRecordError
from .index import check_index, default_index_path, load_index, scan_index, write_index
from .streams import open_stream

__all__ = ["expand_paths", "shard_index", "index_cache_dir"]

log = logging.getLogger(__name__)
_SKIP_SUFFIXES = (".index", ".idx", ".json", ".txt", ".partial")


def expand_paths(paths) -> list[str]:
    """Shard paths from a path, a glob pattern, a directory, or a list of these.

    A directory gives the files directly inside it, sorted, minus index and
    metadata files (``.index``, ``.idx``, ``.json``, ``.txt``) and hidden files.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for item in paths:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = sorted(os.path.join(item, f) for f in os.listdir(item)
                           if not f.startswith(".") and not f.endswith(_SKIP_SUFFIXES)
                           and os.path.isfile(os.path.join(item, f)))
        elif glob.has_magic(item):
            found = sorted(f for f in glob.glob(item) if not f.endswith(_SKIP_SUFFIXES))
            if not found:
                raise FileNotFoundError(f"no files match {item!r}")
        elif os.path.exists(item):
            found = [item]
        else:
            raise FileNotFoundError(f"no such file or directory: {item!r}")
        out.extend(f for f in found if f not in out)
    return out


def index_cache_dir() -> str:
    """Where indexes go when a shard's folder is read-only:
    ``$TFRECORD_TORCH_CACHE`` or ``~/.cache/tfrecord_torch/index``."""
    return os.environ.get("TFRECORD_TORCH_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "tfrecord_torch", "index")


def _cached_index_path(path: str) -> str:
    st = os.stat(path)
    key = f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    name = os.path.basename(path)[:60]
    return os.path.join(index_cache_dir(), f"{name}.{hashlib.sha256(key).hexdigest()[:20]}.index")


def is_compressed(path: str, compression) -> bool:
    with open_stream(path, compression) as stream:
        return stream.compression is not None


def shard_index(path: str, index_path: str | None = None, *, build: bool = True) -> np.ndarray:
    """The checked index of an uncompressed shard.

    Uses ``index_path`` if given (it must match: a mismatch is an error), else
    ``<path>.index`` or a cached index, rebuilding either when it does not match
    the shard. New indexes are written beside the shard, or in the cache folder
    when the shard's folder is read-only.
    """
    if index_path is not None:
        index = load_index(index_path)
        check_index(index, path, index_path=index_path)
        return index
    candidates = [default_index_path(path), _cached_index_path(path)]
    for candidate in candidates:
        if os.path.exists(candidate):
            try:
                index = load_index(candidate)
                check_index(index, path, index_path=candidate)
                return index
            except IndexMismatchError as e:
                log.warning("rebuilding a stale index: %s", e)
    if not build:
        raise TFRecordError(f"{path}: no index (build one with `tfrecord-torch index`)")
    index = scan_index(path)
    for candidate in candidates:
        try:
            os.makedirs(os.path.dirname(candidate), exist_ok=True)
            write_index(index, candidate)
            log.info("built index %s", candidate)
            break
        except OSError as e:
            log.debug("cannot write index %s: %s", candidate, e)
    return index
