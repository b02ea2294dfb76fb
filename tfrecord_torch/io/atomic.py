"""Files that appear complete or not at all: temporary names published by
rename (or by a finished upload), and folder locks."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import BinaryIO

from tfrecord_torch.io.files import filesystem, is_url, local
from tfrecord_torch.io.retry import retrying

__all__ = ["create_temp", "fsync_dir", "lock_file", "remove", "remove_orphans", "unlock", "upload", "write_bytes",
           "writing"]


def write_bytes(path, data: bytes, storage_options: dict | None = None) -> None:
    """Write a small file so it appears complete or not at all."""
    if is_url(path):
        fs, p = filesystem(path, storage_options)
        retrying("write", path, lambda: fs.pipe_file(p, data))
        return
    with writing(path) as f:
        f.write(data)


@contextlib.contextmanager
def writing(path) -> Iterator[BinaryIO]:
    """A local file written under a temporary name beside ``path`` and renamed
    to it (after fsync) only when the block ends without error. The temporary
    file is flocked while written, so :func:`remove_orphans` removes it only
    once its writer is gone (killed)."""
    path = local(path)
    fd, temp = create_temp(os.path.dirname(os.path.abspath(path)), os.path.basename(path), lock=True)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def fsync_dir(folder: str) -> None:
    """Make the renames in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_file(path: str, *, wait: bool) -> int | None:
    """Take an exclusive flock on ``path`` (created if missing) and return its
    descriptor (release it with :func:`unlock`, which removes the file); without
    ``wait``, None if another holds it."""
    import fcntl

    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:  # the holder we waited for may have removed the file: then lock the one now there
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def unlock(path: str, fd: int) -> None:
    """Release a lock taken by :func:`lock_file` and remove its file, so a finished
    writer leaves no lock file behind (a waiter then locks a new file)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.close(fd)


def remove(url: str, storage_options: dict | None = None) -> None:
    """Delete a remote object."""
    fs, p = filesystem(url, storage_options)
    retrying("delete", url, lambda: fs.rm_file(p))


def create_temp(folder: str | None, base: str, *, lock: bool = False) -> tuple[int, str]:
    """A new hidden ``.<base>.<random>.partial`` file, opened for writing, with
    the permissions ``open()`` gives (the kernel applies the umask).

    With ``lock``, the file is flocked while its descriptor is open, so
    :func:`remove_orphans` can tell a live writer's file from a killed one's."""
    import secrets
    import tempfile

    folder = folder or tempfile.gettempdir()
    while True:
        temp = os.path.join(folder, f".{base}.{secrets.token_hex(4)}.partial")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue
        if lock:
            _flock(fd, wait=True)
        return fd, temp


def _flock(fd: int, *, wait: bool) -> bool:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): orphans are left alone
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def remove_orphans(folder: str, base: str) -> list[str]:
    """Remove ``.<base>.<random>.partial`` files that no live writer holds
    (a killed writer's); returns their paths. Files of writers still running
    are locked by them and left alone."""
    import re

    pattern = re.compile(rf"\.{re.escape(base)}\.[0-9a-f]{{8}}\.partial")
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not pattern.fullmatch(name):
            continue
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if _flock(fd, wait=False):  # nobody holds it: its writer is gone
                os.unlink(path)
                removed.append(path)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def upload(local_path: str, url: str, storage_options: dict | None = None) -> None:
    """Upload a finished local file; the object appears only when complete."""
    fs, p = filesystem(url, storage_options)
    retrying("upload", url, lambda: fs.put_file(local_path, p))
