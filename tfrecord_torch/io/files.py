"""Local paths and fsspec URLs (s3://, gs://, http(s)://, memory://, ...)
behind one small interface.

Local paths (and ``file://`` URLs) use plain OS calls: unbuffered reads and
``pread``. Anything else goes through fsspec: streaming reads use large
sequential reads (read-ahead), random reads fetch just the requested byte
range, and each read is retried a bounded number of times with backoff
before a :class:`RemoteError` naming the URL and byte range is raised.
fsspec drops its cached filesystem objects in a forked process, so
DataLoader workers open connections of their own.
"""

from __future__ import annotations

import io
import logging
import os
from typing import Any

from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.io.retry import retrying

__all__ = ["RemoteFile", "exists", "expand", "filesystem", "is_url", "local", "open_read", "read_bytes",
           "size_and_version"]

log = logging.getLogger(__name__)
READ_AHEAD = 16 << 20  # block size of streaming remote reads


def is_url(path) -> bool:
    """True for an fsspec URL that is not a local file."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def local(path) -> str:
    """A local path for a path or ``file://`` URL."""
    path = os.fspath(path)
    return path[len("file://"):] if path.startswith("file://") else path


def filesystem(url: str, storage_options: dict | None):
    import fsspec

    return fsspec.core.url_to_fs(url, **(storage_options or {}))


def size_and_version(path, storage_options: dict | None = None) -> tuple[int, str]:
    """Size in bytes and a version tag (mtime, or the object's ETag) of a file."""
    if not is_url(path):
        st = os.stat(local(path))
        return st.st_size, str(st.st_mtime_ns)
    fs, p = filesystem(path, storage_options)
    info = retrying("stat", path, lambda: fs.info(p))
    version = info.get("ETag") or info.get("etag") or info.get("LastModified") or info.get("mtime") or ""
    return int(info["size"]), str(version)


def exists(path, storage_options: dict | None = None) -> bool:
    if not is_url(path):
        return os.path.exists(local(path))
    fs, p = filesystem(path, storage_options)
    return bool(retrying("exists", path, lambda: fs.exists(p)))


def read_bytes(path, storage_options: dict | None = None, limit: int = 256 << 20) -> bytes:
    """The whole of a small file (an index, metadata)."""
    if not is_url(path):
        with open(local(path), "rb") as f:
            data = f.read(limit + 1)
    else:
        fs, p = filesystem(path, storage_options)
        size, _ = size_and_version(path, storage_options)
        if size > limit:
            raise TFRecordError(f"{path}: larger than {limit} bytes")
        data = retrying("read", path, lambda: fs.cat_file(p))
    if len(data) > limit:
        raise TFRecordError(f"{path}: larger than {limit} bytes")
    return data


class RemoteFile(io.RawIOBase):
    """Sequential reads of a remote object, read ahead in large blocks, with
    each failed read retried from where it stood."""

    def __init__(self, url: str, storage_options: dict | None = None, start: int = 0,
                 end: int | None = None) -> None:
        self.url, self._so = url, storage_options
        self._fs, self._path = filesystem(url, storage_options)
        self._pos, self._end = start, end
        self._file: Any = None

    def readable(self) -> bool:
        return True

    def _open(self):
        f = self._fs.open(self._path, "rb", block_size=READ_AHEAD, cache_type="readahead")
        f.seek(self._pos)
        return f

    def read(self, n: int = -1) -> bytes:
        if self._end is not None:
            n = self._end - self._pos if n is None or n < 0 else min(n, self._end - self._pos)
        if n == 0:
            return b""

        def attempt() -> bytes:
            try:
                if self._file is None:
                    self._file = self._open()
                return self._file.read(n)
            except Exception:
                self._drop()
                raise

        end = "" if n is None or n < 0 else self._pos + n
        data = retrying(f"read of bytes {self._pos}-{end}", self.url, attempt)
        self._pos += len(data)
        return data

    def _drop(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except Exception:  # a broken connection may fail to close too
                pass
            self._file = None

    def close(self) -> None:
        self._drop()
        super().close()


def _unstrip(fs, protocol: str, path: str) -> str:
    """A URL for a path fsspec returned without its protocol."""
    if protocol == "memory":
        return f"memory://{path.lstrip('/')}"
    return f"{protocol}://{path}"


def open_read(path, storage_options: dict | None = None, start: int = 0, end: int | None = None):
    """A raw binary file for sequential reads of ``path`` (from ``start`` to
    ``end``), and the number of bytes it holds."""
    if is_url(path):
        size, _ = size_and_version(path, storage_options)
        end = size if end is None else min(end, size)
        return RemoteFile(path, storage_options, start, end), end - start
    f = open(local(path), "rb", buffering=0)
    size = os.fstat(f.fileno()).st_size
    end = size if end is None else min(end, size)
    if start:
        f.seek(start)
    return f, end - start


def expand(patterns, storage_options: dict | None, skip: tuple) -> list[str]:
    """Files matching paths, globs and folders, local or remote (see shards.expand_paths)."""
    import glob as globlib

    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    out: dict[str, None] = {}  # ordered, without repeats
    for item in patterns:
        item = os.fspath(item)
        if is_url(item):
            fs, p = filesystem(item, storage_options)
            protocol = item.split("://", 1)[0]
            if globlib.has_magic(p):
                found = sorted(retrying("glob", item, lambda: fs.glob(p)))
            elif retrying("isdir", item, lambda: fs.isdir(p)):
                found = sorted(f for f in retrying("list", item, lambda: fs.find(p, maxdepth=1)))
            elif retrying("exists", item, lambda: fs.exists(p)):
                found = [p]
            else:
                raise FileNotFoundError(f"no such file or prefix: {item!r}")
            found = [f if "://" in f else _unstrip(fs, protocol, f) for f in found
                     if not os.path.basename(f).startswith(".") and not f.endswith(skip)]
            if not found and globlib.has_magic(p):
                raise FileNotFoundError(f"no files match {item!r}")
        else:
            item = local(item)
            if os.path.isdir(item):
                found = sorted(os.path.join(item, f) for f in os.listdir(item)
                               if not f.startswith(".") and not f.endswith(skip)
                               and os.path.isfile(os.path.join(item, f)))
            elif globlib.has_magic(item):
                found = sorted(f for f in globlib.glob(item) if not f.endswith(skip) and os.path.isfile(f))
                if not found:
                    raise FileNotFoundError(f"no files match {item!r}")
            elif os.path.exists(item):
                found = [item]
            else:
                raise FileNotFoundError(f"no such file or directory: {item!r}")
        out.update(dict.fromkeys(found))
    return list(out)
