"""Range reads handed over piece by piece, as the body arrives.

A range read through fsspec (``cat_file``) gathers the whole body and joins
its pieces into one new buffer before it returns: for a shard cache's copy,
which writes the bytes to disk at once, that is one more copy of every byte
and a fresh multi-MiB buffer per request, whose pages the kernel must map and
zero each time (a cold-cache epoch measured here spent more CPU on these than
on the request itself). :func:`stream_range` gives each piece to a callback
as it comes off the connection instead, still in cache, for S3 (s3fs: one
``GetObject`` with a ``Range``, its body read a piece at a time on s3fs's
event loop); any other file system gets the same callback with the whole
range, read by :func:`tfrecord_torch.io.files.read_range`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["PIECE", "Answer", "streams"]

PIECE = 1 << 20  # the most bytes handed over at once (what has arrived, up to this)


def streams(fs: Any) -> bool:
    """Whether ranges of ``fs`` are read piece by piece (an s3fs file system
    that runs its own event loop)."""
    try:
        import s3fs
    except ImportError:
        return False
    return isinstance(fs, s3fs.S3FileSystem) and not fs.asynchronous and getattr(fs, "loop", None) is not None


def s3_pieces(fs: Any, path: str, start: int, end: int, sink: Callable[[int, bytes], None],
              cancel: threading.Event | None, check: Callable[[Answer], None] | None = None) -> int:
    """Bytes ``[start, end)`` of ``path`` (an s3fs path) handed to
    ``sink(offset, piece)`` in order, by one streamed request; the offset
    reached: ``end``, or less at the object's end or once ``cancel`` is set.
    ``sink`` and ``check`` run on s3fs's event loop: they must not wait for
    that loop. ``check(answer)`` is given the object's version and size as
    the answer states them, before any of its bytes go to ``sink`` (its
    error ends the request)."""
    from fsspec.asyn import sync

    return sync(fs.loop, _pieces, fs, path, start, end, sink, cancel, check)


class Answer(NamedTuple):
    """What the answer to a range request says of the object: its ETag
    (None if it gives none) and its whole size (None if it does not say)."""

    etag: str | None
    size: int | None


def _answer(answer: dict) -> Answer:
    total = str(answer.get("ContentRange") or "").rpartition("/")[2]
    return Answer(answer.get("ETag"), int(total) if total.isdigit() else None)


async def _pieces(fs: Any, path: str, start: int, end: int, sink: Callable[[int, bytes], None],
                  cancel: threading.Event | None, check: Callable[[Answer], None] | None = None) -> int:
    bucket, key, version = fs.split_path(path)
    asked = {"VersionId": version} if version else {}
    answer = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **asked)
    body = answer["Body"]
    at = start
    try:
        if check is not None:
            check(_answer(answer))
        while at < end and not (cancel is not None and cancel.is_set()):
            piece = await body.read(min(end - at, PIECE))
            if not piece:
                break
            piece = piece[:end - at]  # a server that sent more than asked: its bytes past the range are not ours
            sink(at, piece)
            at += len(piece)
    finally:
        body.close()
    return at
