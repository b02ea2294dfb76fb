"""Records of an indexed shard, read at once.

:func:`read_frames` reads records ``r0`` to ``r1 - 1`` of a local shard, each
payload straight into its bytes object (a ``preadv`` per 341 records, no
buffer of the whole run to fault in and copy out), and checks each frame
(its length against the index, both CRCs when asked), in C where
``records/_frames.c`` was built; :func:`read_records` does the same for
records anywhere in the shard (a shuffled batch's), a ``preadv`` per stretch
of adjacent ones, the GIL released once for all of them. It never raises for bad data: anything it
does not vouch for is left to the usual path
(:func:`~tfrecord_torch.records.scan.scan` and
:func:`~tfrecord_torch.records.framing.parse_frame`), which names the file,
offset and record in its error. Stream reading of whole files is
:mod:`.framing`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

import numpy as np

__all__ = ["READ_LIMIT", "compiled_frames", "cut_frames", "read_frames", "read_records"]

READ_LIMIT = 64 << 20  # the most bytes of frames one call reads (MAX_SPAN in _frames.c)


def _compiled():  # the compiled reader, or None (not built, or a big-endian machine)
    if sys.byteorder != "little":
        return None
    try:
        # by name: grimp reads `from tfrecord_torch.records import _frames` as an import of the
        # package (it sees no .so), a cycle through the package's face
        return importlib.import_module("tfrecord_torch.records._frames")
    except ImportError:
        return None


_FRAMES = _compiled()


def compiled_frames() -> bool:
    """Whether :func:`read_frames` reads (the compiled reader is built)."""
    return _FRAMES is not None


def read_frames(fd: int, index: np.ndarray, r0: int, r1: int, verify: bool,
                crc: Callable[[bytes], int]) -> list[bytes] | None:
    """The payloads of records ``r0`` to ``r1 - 1`` of a shard (``index``: its
    int64 [n, 2] offsets and frame sizes), adjacent in the file, read with positioned
    reads from the open file ``fd`` and checked (``crc``: the crc32c
    package's function, for long payloads); None where the usual path must
    read them (records not adjacent, over 64 MiB at once, a short read, a
    length or CRC that does not match). Where the compiled reader is built
    this name is its function; this form, without it, leaves every run to
    the usual path."""
    return None


def read_records(fd: int, index: np.ndarray, records: np.ndarray, verify: bool,
                 crc: Callable[[bytes], int]) -> list[bytes] | None:
    """The payloads of the records numbered in ``records`` (int64, one
    dimension; read in the order given, best ascending) of a local shard,
    read from ``fd`` and checked as :func:`read_frames` checks a run; None
    where the usual path must read them (a number outside the index, over 64 MiB
    at once, a short read, a length or CRC that does not match). Without the
    compiled reader, None."""
    return None


def cut_frames(data: bytes, index: np.ndarray, r0: int, r1: int, verify: bool,
               crc: Callable[[bytes], int]) -> list[bytes] | None:
    """The payloads of records ``r0`` to ``r1 - 1`` of a shard, adjacent in
    the file, cut from ``data`` (the file's bytes from record ``r0``'s
    offset on, such as a window fetched from a bucket) and checked as
    :func:`read_frames` checks them; None where the usual path must cut
    them (records not adjacent, over 64 MiB at once, frames past the end of
    ``data``, a length or CRC that does not match). Without the compiled
    reader, None."""
    return None


if _FRAMES is not None:
    read_frames = _FRAMES.read_frames  # noqa: F811
    read_records = _FRAMES.read_records  # noqa: F811
    cut_frames = _FRAMES.cut_frames  # noqa: F811
