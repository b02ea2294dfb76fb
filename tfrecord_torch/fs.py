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
import re
import time

from .errors import TFRecordError

__all__ = ["RemoteError", "exists", "is_url", "open_read", "read_at", "read_bytes", "size_and_version",
           "write_bytes"]

log = logging.getLogger(__name__)
RETRIES = 4  # attempts after the first
BACKOFF = 0.2  # seconds before the first retry; doubles each time
READ_AHEAD = 16 << 20  # block size of streaming remote reads


class RemoteError(TFRecordError):
    """A remote read or write failed after its retries."""

    def __init__(self, url: str, detail: str | None = None) -> None:
        if detail is None:  # one argument: a worker's message, as DataLoader re-raises it
            found = re.findall(r"RemoteError: (\S+): ([^\n]*)", url)
            url, detail = found[-1] if found else ("<unknown>", url)
        self.url = url
        super().__init__(f"{url}: {detail}")

    def __reduce__(self):
        return (type(self), (self.url, str(self)[len(self.url) + 2:]))


def is_url(path) -> bool:
    """True for an fsspec URL that is not a local file."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def local(path) -> str:
    """A local path for a path or ``file://`` URL."""
    path = os.fspath(path)
    return path[len("file://"):] if path.startswith("file://") else path


def _fs(url: str, storage_options: dict | None):
    import fsspec

    return fsspec.core.url_to_fs(url, **(storage_options or {}))


def retrying(what: str, url: str, call, *, retries: int = RETRIES):
    """Run ``call()``, retrying transient failures; then RemoteError(url, what)."""
    delay = BACKOFF
    for attempt in range(retries + 1):
        try:
            return call()
        except (FileNotFoundError, PermissionError, IsADirectoryError, TFRecordError):
            raise
        except Exception as e:  # network stacks raise many types (aiohttp, botocore, OSError)
            if attempt == retries:
                raise RemoteError(url, f"{what} failed after {retries + 1} attempts: "
                                       f"{type(e).__name__}: {e}") from e
            log.warning("%s: %s failed (%s: %s); retrying in %.1fs", url, what, type(e).__name__, e, delay)
            time.sleep(delay)
            delay *= 2


def size_and_version(path, storage_options: dict | None = None) -> tuple[int, str]:
    """Size in bytes and a version tag (mtime, or the object's ETag) of a file."""
    if not is_url(path):
        st = os.stat(local(path))
        return st.st_size, str(st.st_mtime_ns)
    fs, p = _fs(path, storage_options)
    info = retrying("stat", path, lambda: fs.info(p))
    version = info.get("ETag") or info.get("etag") or info.get("LastModified") or info.get("mtime") or ""
    return int(info["size"]), str(version)


def exists(path, storage_options: dict | None = None) -> bool:
    if not is_url(path):
        return os.path.exists(local(path))
    fs, p = _fs(path, storage_options)
    return bool(retrying("exists", path, lambda: fs.exists(p)))


def read_bytes(path, storage_options: dict | None = None, limit: int = 256 << 20) -> bytes:
    """The whole of a small file (an index, metadata)."""
    if not is_url(path):
        with open(local(path), "rb") as f:
            data = f.read(limit + 1)
    else:
        fs, p = _fs(path, storage_options)
        size, _ = size_and_version(path, storage_options)
        if size > limit:
            raise TFRecordError(f"{path}: larger than {limit} bytes")
        data = retrying("read", path, lambda: fs.cat_file(p))
    if len(data) > limit:
        raise TFRecordError(f"{path}: larger than {limit} bytes")
    return data


def write_bytes(path, data: bytes, storage_options: dict | None = None) -> None:
    """Write a small file so it appears complete or not at all."""
    if is_url(path):
        fs, p = _fs(path, storage_options)
        retrying("write", path, lambda: fs.pipe_file(p, data))
        return
    path = local(path)
    fd, temp = create_temp(os.path.dirname(os.path.abspath(path)), os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def lock_file(path: str, *, wait: bool) -> int | None:
    """Take an exclusive flock on ``path`` (created if missing) and return its
    descriptor (close it to release); without ``wait``, None if another holds it."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def remove(url: str, storage_options: dict | None = None) -> None:
    """Delete a remote object."""
    fs, p = _fs(url, storage_options)
    retrying("delete", url, lambda: fs.rm_file(p))


def create_temp(folder: str | None, base: str) -> tuple[int, str]:
    """A new hidden ``.<base>.<random>.partial`` file, opened for writing, with
    the permissions ``open()`` gives (the kernel applies the umask)."""
    import secrets
    import tempfile

    folder = folder or tempfile.gettempdir()
    while True:
        temp = os.path.join(folder, f".{base}.{secrets.token_hex(4)}.partial")
        try:
            return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), temp
        except FileExistsError:
            continue


def upload(local_path: str, url: str, storage_options: dict | None = None) -> None:
    """Upload a finished local file; the object appears only when complete."""
    fs, p = _fs(url, storage_options)
    retrying("upload", url, lambda: fs.put_file(local_path, p))


class RemoteFile(io.RawIOBase):
    """Sequential reads of a remote object, read ahead in large blocks, with
    each failed read retried from where it stood."""

    def __init__(self, url: str, storage_options: dict | None = None, start: int = 0,
                 end: int | None = None) -> None:
        self.url, self._so = url, storage_options
        self._fs, self._path = _fs(url, storage_options)
        self._pos, self._end = start, end
        self._file = None

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


class Reader:
    """Positioned reads of one file: ``pread`` locally, one range request
    remotely. Reopens in a forked child."""

    def __init__(self, path, storage_options: dict | None = None) -> None:
        self.path, self._so = path, storage_options
        self._handle, self._pid = None, None

    def read(self, offset: int, size: int) -> bytes:
        if self._handle is None or self._pid != os.getpid():
            self._pid = os.getpid()
            self._handle = _fs(self.path, self._so) if is_url(self.path) else \
                os.open(local(self.path), os.O_RDONLY | getattr(os, "O_BINARY", 0))
        if not is_url(self.path):
            return os.pread(self._handle, size, offset)
        fs, p = self._handle
        what = f"read of bytes {offset}-{offset + size}"
        data = retrying(what, self.path, lambda: fs.cat_file(p, start=offset, end=offset + size))
        if len(data) > size:  # the server ignored the Range header and sent more
            raise RemoteError(self.path, f"{what}: the server answered {len(data)} bytes; it does "
                                         "not support range requests, so random access cannot work")
        return data

    def close(self) -> None:
        if self._handle is not None and self._pid == os.getpid() and not is_url(self.path):
            os.close(self._handle)
        self._handle = None

    def __getstate__(self):
        return {**self.__dict__, "_handle": None, "_pid": None}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class Readers:
    """At most ``limit`` open :class:`Reader` objects, least recently used
    closed first, so reading thousands of shards never runs out of file
    descriptors."""

    def __init__(self, storage_options: dict | None = None, limit: int = 16) -> None:
        from collections import OrderedDict

        self._so, self._limit = storage_options, limit
        self._open: OrderedDict = OrderedDict()

    def get(self, path: str) -> Reader:
        reader = self._open.pop(path, None)
        if reader is None:
            reader = Reader(path, self._so)
            while len(self._open) >= self._limit:
                self._open.popitem(last=False)[1].close()
        self._open[path] = reader
        return reader

    def close(self) -> None:
        for reader in self._open.values():
            reader.close()
        self._open.clear()

    def __getstate__(self):
        return {**self.__dict__, "_open": type(self._open)()}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


def read_at(path, offset: int, size: int, storage_options: dict | None = None) -> bytes:
    """One positioned read (opens and closes the file; use :class:`Reader` for many)."""
    reader = Reader(path, storage_options)
    try:
        return reader.read(offset, size)
    finally:
        reader.close()


def expand(patterns, storage_options: dict | None, skip: tuple) -> list[str]:
    """Files matching paths, globs and folders, local or remote (see shards.expand_paths)."""
    import glob as globlib

    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    out: dict[str, None] = {}  # ordered, without repeats
    for item in patterns:
        item = os.fspath(item)
        if is_url(item):
            fs, p = _fs(item, storage_options)
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
