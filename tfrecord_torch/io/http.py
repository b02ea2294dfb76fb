"""HTTP(S) reads that work with servers that ignore ``Range``.

A server may answer a range request with ``200`` and the whole body. fsspec
then downloads everything (a 12-byte sniff fetches the whole object) or gives
up after its first block. Here every read is one streamed GET whose status is
looked at before its body is read:

- sequential reads (streaming a shard) read the body as it arrives, in
  bounded memory, to the end; a read that must start past byte 0 on such a
  server skips the bytes before it as they arrive;
- a read at byte 0 (the compression sniff) reads its few bytes and closes;
- a random read past byte 0 on such a server is a :class:`RemoteError`
  saying the server does not support range requests, with nothing downloaded.
"""

from __future__ import annotations

from typing import Any

from tfrecord_torch.errors import RemoteError

__all__ = ["RangesIgnored", "is_http", "open_get", "read_range", "supports_ranges"]

_SKIP = 1 << 20  # bytes discarded per read when skipping to a start offset


class RangesIgnored(RemoteError):
    """The server answered a range request with the whole object."""


def is_http(url: str) -> bool:
    return url.split("://", 1)[0].lower() in ("http", "https")


def open_get(fs, path: str, url: str, start: int = 0, end: int | None = None, *, skip: bool = True) -> Any:
    """A streamed GET of ``path`` from ``start`` (to ``end``, exclusive). When the
    server ignores the range and ``start`` > 0: with ``skip`` the bytes before
    ``start`` are read and dropped, else :class:`RangesIgnored` is raised."""
    from fsspec.asyn import sync
    from fsspec.implementations.http import HTTPStreamFile

    kw = dict(fs.kwargs)
    headers = dict(kw.pop("headers", None) or {})
    if start or end is not None:
        headers["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
    session = sync(fs.loop, fs.set_session)
    f = HTTPStreamFile(fs, path, mode="rb", loop=fs.loop, session=session, headers=headers, **kw)
    status = getattr(getattr(f, "r", None), "status", None)
    if status == 200 and start:
        if not skip:
            f.close()
            raise RangesIgnored(url, f"the server answered a request for bytes {start}-"
                                     f"{'' if end is None else end - 1} with the whole object (HTTP 200): "
                                     "it does not support range requests, so random access (an index) "
                                     "cannot work; stream it with index=False or read_records()")
        left = start
        while left > 0:
            piece = f.read(min(left, _SKIP))
            if not piece:
                break
            left -= len(piece)
    return f


def read_range(fs, path: str, url: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` (fewer at the end); see the module docstring."""
    f = open_get(fs, path, url, start, end, skip=False)
    try:
        parts, want = [], end - start
        while want > 0:
            piece = f.read(want)
            if not piece:
                break
            parts.append(piece)
            want -= len(piece)
        return b"".join(parts)
    finally:
        f.close()


def supports_ranges(fs, path: str, url: str, size: int) -> None:
    """Raise :class:`RangesIgnored` unless the server honours a range request
    (one small request; nothing else is downloaded)."""
    if size < 2:
        return
    read_range(fs, path, url, 1, 2)
