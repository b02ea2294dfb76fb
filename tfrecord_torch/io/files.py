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

import errno
import io
import logging
import os
import stat
import threading
from collections.abc import Callable
from typing import Any

from tfrecord_torch._threads import may_wait_for, on_fsspec_loop  # noqa: F401 - their home was here
from tfrecord_torch.errors import RemoteError, TFRecordError
from tfrecord_torch.io import http, s3session, streamed
from tfrecord_torch.io.retry import retrying, status_of

__all__ = ["RemoteFile", "answers_checked", "changed_object", "exists", "filesystem", "fresh_size_and_version", "is_url",
           "listed_versions", "local", "open_read", "pread_all", "ranged", "read_bytes", "read_range", "require_ranges",
           "size_and_version", "stream_range", "unstrip", "version_of"]

log = logging.getLogger(__name__)
READ_AHEAD = 16 << 20  # bytes a streaming remote read fetches past those asked for, unless given (ReadBudget.stream)


def is_url(path) -> bool:
    """True for an fsspec URL that is not a local file."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def local(path) -> str:
    """A local path for a path or ``file://`` URL."""
    path = os.fspath(path)
    return path[len("file://"):] if path.startswith("file://") else path


S3_CONNECTIONS = 32  # connections of an S3 filesystem, unless given: io/ranges.py keeps 32 requests in flight


def filesystem(url: str, storage_options: dict | None):
    """The fsspec filesystem and path of ``url``. An S3 filesystem gets
    ``config_kwargs={"max_pool_connections": 32}`` unless the options say
    otherwise (botocore's default of 10 would hold back requests in flight),
    and a session whose botocore data a forked worker inherits
    (:mod:`tfrecord_torch.io.s3session`).

    With ``skip_instance_cache=True`` in the options, fsspec builds a new
    filesystem object on every call (for S3 a new client: about 0.1 s of CPU,
    and a cold shuffled epoch over 24 shards makes some 240 calls); this
    process then keeps one for the package's own reads, per protocol and
    options, never shared with the caller's objects nor with a forked child."""
    import fsspec

    options = storage_options or {}
    if url.startswith(("s3://", "s3a://")):
        if "max_pool_connections" not in (options.get("config_kwargs") or {}):
            options = {**options, "config_kwargs": {**(options.get("config_kwargs") or {}),
                                                    "max_pool_connections": S3_CONNECTIONS}}
        options = s3session.with_shared_data(options)
    if not options.get("skip_instance_cache") or "::" in url:  # fsspec keeps one itself (chained URLs: always)
        return fsspec.core.url_to_fs(url, **options)
    protocol = fsspec.core.split_protocol(url)[0] or "file"
    cls = fsspec.get_filesystem_class(protocol)
    key = (protocol, fsspec.utils.tokenize(options, cls._get_kwargs_from_urls(url)))
    with _own_lock:
        system = _own.get(key)
        if system is None:
            system, path = fsspec.core.url_to_fs(url, **options)
            _own[key] = system
            return system, path
    return system, cls._strip_protocol(url)


_own: dict[tuple[str, str], Any] = {}  # filesystem() of options with skip_instance_cache, for this process
_own_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child: the parent's objects hold its connections and loop
    os.register_at_fork(after_in_child=_own.clear)


def size_and_version(path, storage_options: dict | None = None) -> tuple[int, str]:
    """Size in bytes and a version tag (mtime, or the object's ETag) of a file."""
    if not is_url(path):
        st = os.stat(local(path))
        return st.st_size, str(st.st_mtime_ns)
    fs, p = filesystem(path, storage_options)
    info = retrying("stat", path, lambda: fs.info(p))
    return int(info["size"]), version_of(info)


def fresh_size_and_version(path, storage_options: dict | None = None) -> tuple[int, str]:
    """:func:`size_and_version` asked of the file system anew: a listing cache
    (s3fs keeps one) would answer with what was listed."""
    if is_url(path):
        system, p = filesystem(path, storage_options)
        system.invalidate_cache(p)
    return size_and_version(path, storage_options)


def changed_object(listed: tuple[int, str], now: tuple[int | None, str | None], when: str, *,
                   seen: str = "now") -> str:
    """What to say of an object found with another (size, version) than listed
    (``seen``: where the new ones were seen)."""
    return (f"the object changed {when} (listed: {listed[0]} bytes, version {listed[1]}; {seen}: {now[0]} bytes, "
            f"version {now[1]}); the dataset's index and counts describe the old object: make the dataset "
            "again to read the new one")


def listed_versions(urls, storage_options: dict | None = None) -> dict[str, tuple[int, str]]:
    """:func:`size_and_version` of remote files, by a fresh listing of their
    folders (each folder's cached listing dropped first): a request per folder
    (per 1,000 names on S3) in place of a stat per file. A file the listing
    leaves out is left out of the answer."""
    folders: dict[str, list[str]] = {}
    for url in urls:
        folders.setdefault(url.rsplit("/", 1)[0], []).append(url)
    found: dict[str, tuple[int, str]] = {}
    for folder, members in folders.items():
        system, path = filesystem(folder, storage_options)
        system.invalidate_cache(path)
        infos = retrying("list", folder, lambda: system.ls(path, detail=True))
        named = {str(info.get("name", "")).rstrip("/"): info for info in infos}
        for url in members:
            info = named.get(str(type(system)._strip_protocol(url)).rstrip("/"))
            if info is not None and info.get("type", "file") == "file" and info.get("size") is not None:
                found[url] = (int(info["size"]), version_of(info))
    return found


def exists(path, storage_options: dict | None = None) -> bool:
    if not is_url(path):
        return os.path.exists(local(path))
    fs, p = filesystem(path, storage_options)
    try:  # fs.exists() says False for any failure; a 503 must be retried, not taken for absence
        retrying("stat", path, lambda: fs.info(p))
    except FileNotFoundError:
        return False
    return True


def read_bytes(path, storage_options: dict | None = None, limit: int = 256 << 20, *,
               size: int | None = None) -> bytes:
    """The whole of a small file (an index, metadata). A remote file's ``size``, if known
    (from a listing), saves its stat: the read is then one request (none if empty)."""
    if not is_url(path):
        with open(local(path), "rb") as f:
            data = f.read(limit + 1)
    else:
        fs, p = filesystem(path, storage_options)
        size = size_and_version(path, storage_options)[0] if size is None else size
        if size > limit:
            raise TFRecordError(f"{path}: larger than {limit} bytes")
        # A range read: a whole-object read may ask for the size again (s3fs does).
        data = retrying("read", path, lambda: fs.cat_file(p, start=0, end=size)) if size else b""
    if len(data) > limit:
        raise TFRecordError(f"{path}: larger than {limit} bytes")
    return data


def pread_all(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset`` of the open file ``fd`` (fewer only at its
    end). One ``os.pread`` may return fewer bytes than asked before the end
    (FUSE, NFS, a read cut by a signal): read on until the end or ``size``."""
    data = os.pread(fd, size, offset)
    while 0 < len(data) < size:
        more = os.pread(fd, size - len(data), offset + len(data))
        if not more:  # the end of the file
            break
        data += more
    return data


def read_range(path, start: int, end: int, storage_options: dict | None = None) -> bytes:
    """Bytes ``[start, end)`` of a file (fewer at its end): one range request for a URL."""
    if not is_url(path):
        with open(local(path), "rb", buffering=0) as f:
            return pread_all(f.fileno(), end - start, start)
    fs, p = filesystem(path, storage_options)
    return ranged(path, start, end, lambda: http.read_range(fs, p, path, start, end) if http.is_http(path)
                  else fs.cat_file(p, start=start, end=end))


def stream_range(path, start: int, end: int, sink: Callable[[int, bytes], None],
                 storage_options: dict | None = None, cancel: threading.Event | None = None,
                 check: Callable[[streamed.Answer], None] | None = None) -> int:
    """Bytes ``[start, end)`` of a file (fewer at its end) handed to
    ``sink(offset, data)`` in order: piece by piece as they arrive where the
    file system streams a range (S3, see :mod:`tfrecord_torch.io.streamed`;
    ``sink`` then runs on its event loop thread and must not wait for that
    loop), else whole, from :func:`read_range`. A request that fails is
    retried from the byte it stood at; an error of ``sink`` is raised as it
    is, never retried. Returns the offset reached: ``end``, or less at the
    file's end or once ``cancel`` is set.

    ``check``: where ranges stream (:func:`answers_checked`), called with
    what each answer says of the object (its ETag and size) before its
    bytes go to ``sink``; its error is raised as it is, never retried.
    Elsewhere it is not called."""
    system, p = filesystem(path, storage_options) if is_url(path) else (None, "")
    if system is None or not streamed.streams(system):
        data = read_range(path, start, end, storage_options)
        if data:
            sink(start, data)
        return start + len(data)
    at = start
    failed: list[BaseException] = []

    def take(offset: int, data: bytes) -> None:
        nonlocal at
        try:
            sink(offset, data)
        except BaseException as e:
            failed.append(e)
            raise _SinkFailed(path) from e
        at = offset + len(data)

    def attempt() -> int:
        if at >= end:  # a retry after the last piece arrived
            return at
        return streamed.s3_pieces(system, p, at, end, take, cancel, check)

    try:
        reached = ranged(path, start, end, attempt)
    except _SinkFailed:
        raise failed[0] from None
    return at if isinstance(reached, bytes) else reached  # b"": past the object's end (HTTP 416)


def answers_checked(path, storage_options: dict | None = None) -> bool:
    """Whether :func:`stream_range` gives its ``check`` each answer of ``path``."""
    if not is_url(path):
        return False
    return streamed.streams(filesystem(path, storage_options)[0])


class _SinkFailed(TFRecordError):
    """A :func:`stream_range` sink's error (final: :func:`retrying` does not retry a TFRecordError)."""


def require_ranges(url: str, storage_options: dict | None = None, size: int | None = None) -> None:
    """For an HTTP(S) URL, raise :class:`RemoteError` unless its server honours range
    requests (random access needs them); one small request, nothing downloaded."""
    if not (is_url(url) and http.is_http(url)):
        return
    fs, p = filesystem(url, storage_options)
    size = size_and_version(url, storage_options)[0] if size is None else size
    retrying("range check", url, lambda: http.supports_ranges(fs, p, url, size))


def ranged(url: str, start: int, end: int, call) -> bytes:
    """``call()`` reading bytes ``[start, end)`` of ``url``, retried; a range past the end of
    the object (HTTP 416, as an empty object answers) is no bytes, not an error."""
    try:
        return retrying(f"read of bytes {start}-{end}", url, call)
    except (RemoteError, OSError) as e:
        if status_of(e) == 416 or "InvalidRange" in str(e):
            return b""
        raise


class RemoteFile(io.RawIOBase):
    """Sequential reads of a remote object, read ahead in large blocks, with
    each failed read retried from where it stood."""

    def __init__(self, url: str, storage_options: dict | None = None, start: int = 0,
                 end: int | None = None, *, ahead: int = READ_AHEAD) -> None:
        self.url = url
        self._fs, self._path = filesystem(url, storage_options)
        self._pos, self._end = start, end
        self._ahead = ahead  # bytes each request fetches past those asked for
        self._file: Any = None

    def readable(self) -> bool:
        return True

    def _open(self):
        if http.is_http(self.url):  # one streamed GET: works when the server ignores Range
            return http.open_get(self._fs, self._path, self.url, self._pos)
        f = self._fs.open(self._path, "rb", block_size=self._ahead, cache_type="readahead")
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


def unstrip(fs, protocol: str, path: str) -> str:
    """A URL for a path fsspec returned without its protocol."""
    if protocol == "memory":
        return f"memory://{path.lstrip('/')}"
    return f"{protocol}://{path}"


def open_read(path, storage_options: dict | None = None, start: int = 0, end: int | None = None, *,
              ahead: int = READ_AHEAD):
    """A raw binary file for sequential reads of ``path`` (from ``start`` to
    ``end``), and the number of bytes it holds; a URL's requests fetch
    ``ahead`` bytes past those asked for."""
    if is_url(path):
        size, _ = size_and_version(path, storage_options)
        end = size if end is None else min(end, size)
        return RemoteFile(path, storage_options, start, end, ahead=ahead), end - start
    f = _open_local(local(path))
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):  # a pipe, FIFO or device: its size is unknown
        if start:
            raise ValueError(f"{path}: cannot start a read at byte {start} of a pipe or device")
        return f, None
    end = st.st_size if end is None else min(end, st.st_size)
    if start:
        f.seek(start)
    return f, end - start


def version_of(info: dict) -> str:
    """An object's version tag from its fsspec info: ETag, else modification time."""
    return str(info.get("ETag") or info.get("etag") or info.get("LastModified") or info.get("mtime") or "")


def pipe_timeout() -> float:
    """Seconds to wait for the first byte of a FIFO: ``$TFRECORD_TORCH_PIPE_TIMEOUT``, default 60."""
    return float(os.environ.get("TFRECORD_TORCH_PIPE_TIMEOUT", "60"))


def _open_local(path: str):
    """Open a local file for unbuffered reads. A FIFO is opened without
    blocking and waited on for at most :func:`pipe_timeout` seconds, so a FIFO
    nobody writes to is an error, not a hang."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise _os_error(path, e) from e
    if not stat.S_ISFIFO(mode):
        return open(path, "rb", buffering=0)
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        timeout = pipe_timeout()
        if not poller.poll(int(timeout * 1000)):
            raise TFRecordError(f"{path}: a FIFO with no data after {timeout:g} s (no writer; "
                                "set TFRECORD_TORCH_PIPE_TIMEOUT to wait longer)")
        os.set_blocking(fd, True)
        return open(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _os_error(path: str, e: OSError) -> OSError:
    """``e`` with a plain-words reason for the cases whose errno text is cryptic."""
    if e.errno == errno.ELOOP:
        return OSError(e.errno, f"{path}: a symbolic link loop (too many levels of symbolic links)", path)
    return e
