"""How many bytes a read asks for first, how its reads grow after, and how
many bytes its parts may hold: one value.

Three reads start small and double: an iteration's first reads (the first
group's records cut into reads of 1, 2, 4 MiB ...), an in-order read's
windows, and a shard-cache fill's first ranges. They start from the same
number on purpose: a reader following a fill waits for the fill's first
range and no more, and a first read that runs ahead of the fill by more than
that goes to the bucket instead of waiting. So the number, and the rule,
live here once (:class:`ReadBudget`, :meth:`ReadBudget.ramp`), and each
reader is handed the value rather than reading a module constant.

The other byte budgets of a read travel with it: how a URL's ranges are
joined into requests and how many are in flight (:class:`RequestBudget`),
how a shard-cache fill asks for and writes its copy (:class:`FillBudget`),
and what a reader holds in memory (groups fetched ahead, windows of small
remote shards). A dataset takes its budget from ``Source(read_budget=...)``;
its read session hands it to the reader pool, the readers' range requests,
the windows, the read-ahead and the copies' fills.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from tfrecord_torch._args import check_instance, check_int

__all__ = ["DEFAULT", "FillBudget", "ReadBudget", "RequestBudget"]

KiB = 1 << 10
MiB = 1 << 20


def _check_bytes(owner: object, name: str, least: int = 1) -> None:
    """The shared check (a ``ValueError`` naming the value and field) that
    ``owner.name`` is a number of bytes >= ``least``."""
    check_int(f"{type(owner).__name__}.{name} (bytes)", getattr(owner, name), minimum=least)


@dataclasses.dataclass(frozen=True)
class RequestBudget:
    """How the byte ranges of a URL are requested (:mod:`tfrecord_torch.io.ranges`).

    Attributes:
        gap: bytes between two ranges read and dropped rather than requested
            apart (256 KiB: about 3 ms at 100 MB/s);
            0: only ranges end to end are joined.
        longest: the longest joined request (4 MiB); longer runs become
            several requests in flight. Also the slice of a shard a shuffled
            reader fetches as one window (:mod:`tfrecord_torch.data.windows`),
            and the longest window of an in-order read from the bucket.
        in_flight: bytes of one iterator's requests in flight or waiting to
            be taken (64 MiB; at least one request).
    """

    gap: int = 256 * KiB
    longest: int = 4 * MiB
    in_flight: int = 64 * MiB

    def __post_init__(self) -> None:
        _check_bytes(self, "gap", 0)
        _check_bytes(self, "longest")
        _check_bytes(self, "in_flight")


@dataclasses.dataclass(frozen=True)
class FillBudget:
    """How a shard-cache fill asks for and writes a copy
    (:func:`~tfrecord_torch.io.shardcache.open_shard`).

    Attributes:
        chunk: a fill's first ranges ramp (:meth:`ReadBudget.ramp`) while
            below this; the ranges after are this long at least (unless the
            rest is shorter), and a server that ignores ``Range`` is read
            this many bytes at a time (4 MiB).
        longest: the longest range request of a fill (8 MiB; each request
            costs about 1-2 ms of CPU, whatever its length).
        ahead: bytes of a fill asked for past what it has written (32 MiB;
            held in memory until their turn to be written).
        write_batch: bytes of a fill that arrived in order before its
            thread wakes to write them (1 MiB: one wake-up per batch, the
            bytes still in the CPU's cache).
    """

    chunk: int = 4 * MiB
    longest: int = 8 * MiB
    ahead: int = 32 * MiB
    write_batch: int = 1 * MiB

    def __post_init__(self) -> None:
        for name in ("chunk", "longest", "ahead", "write_batch"):
            _check_bytes(self, name)


@dataclasses.dataclass(frozen=True)
class ReadBudget:
    """The byte budgets of an iteration's reads (TFDS's ``ReadConfig`` for bytes).

    Attributes:
        first: bytes of an iteration's first read, of an in-order read's
            first window and of a shard-cache fill's first range; each next
            one twice the one before (:meth:`ramp`). Also the bytes of a
            fill's first range that an iteration's first reads wait for:
            records past them that the fill has not written yet come from the
            bucket, never waiting for a later range. Smaller: the first
            records sooner; larger: fewer requests on a bucket far away.
        early: the reads of a shuffled iteration that begin before it has
            read this many bytes are its early ones (they wait for no fill's
            later ranges).
        window: the longest window of an in-order read of a local file or a
            complete copy (a URL's windows are at most one request long:
            ``requests.longest``).
        far: bytes past what a fill has written beyond which a later read
            that need not wait goes to the bucket (16 MiB: about what a fill
            has in flight). Also the bytes the shard cache copies ahead of
            an in-order reader at least (more shards than its ``ahead``
            while they hold less), and at most at once.
        group: the most bytes of one shard an in-order read of indexed
            shards reads as one group (16 MiB; at least one record). Read by
            range requests (no shard cache), consecutive shards smaller
            than that are one group up to it, their requests in flight
            together.
        read_ahead: bytes of fetched groups one reader holds ahead of its
            decoding, the one decoding included (64 MiB).
        windowed: the most bytes of remote shards a shuffled reader holds in
            memory as windows (64 MiB); shards holding more are read a
            record's range at a time. 0: never windows.
        stream: a remote shard read as a stream (compressed, or read whole
            to index it): the bytes each request fetches past what the
            decompressor asked for, and the most bytes of its chunks read
            ahead of the decoding (16 MiB). 0: each request is what was asked.
        requests: how a URL's ranges are requested (:class:`RequestBudget`).
        fill: how a shard-cache fill asks for and writes its copy
            (:class:`FillBudget`).
    """

    first: int = 1 * MiB
    early: int = 4 * MiB
    window: int = 16 * MiB
    far: int = 16 * MiB
    group: int = 16 * MiB
    read_ahead: int = 64 * MiB
    windowed: int = 64 * MiB
    stream: int = 16 * MiB
    requests: RequestBudget = RequestBudget()
    fill: FillBudget = FillBudget()

    def __post_init__(self) -> None:
        for name in ("first", "early", "window", "far", "group", "read_ahead"):
            _check_bytes(self, name)
        _check_bytes(self, "windowed", 0)
        _check_bytes(self, "stream", 0)
        check_instance("ReadBudget.requests", self.requests, RequestBudget, "a RequestBudget")
        check_instance("ReadBudget.fill", self.fill, FillBudget, "a FillBudget")

    def ramp(self, longest: int | None = None) -> Iterator[int]:
        """The sizes of reads that start small and double: :attr:`first`,
        then each twice the one before, each at most ``longest`` (None: no
        bound); endless (the caller stops when its bytes are covered)."""
        step = self.first if longest is None else min(self.first, longest)
        while True:
            yield step
            step = 2 * step if longest is None else min(2 * step, longest)


DEFAULT = ReadBudget()
"""The budget of a reader given none (the value, not a knob: pass another)."""
