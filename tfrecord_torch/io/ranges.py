"""Many byte ranges of one file, read together.

Near ranges are joined into one request (for a URL, up to the reader's
budget's ``requests.gap`` bytes between them are read and dropped rather
than paying a second round trip, as long as a request reads at most
:data:`MERGE_RATIO` times the bytes of the ranges it covers, and is at most
``requests.longest`` bytes); the requests of a URL are then in flight
together on the request threads of the reader's pool
(:attr:`~tfrecord_torch.io.pool.ReaderPool.requests`, joined when that pool
closes), at most :data:`IN_FLIGHT` requests and ``requests.in_flight``
bytes ahead of the one the caller waits for. The budget is the reader's
(:attr:`~tfrecord_torch.io.pool.Reader.budget`: its pool's, handed down by
the read session from ``Source(read_budget=)``). Each
request is retried on its own (5xx, throttling, dropped connections: see
:mod:`tfrecord_torch.io.retry`), and the bytes come back in the order asked,
so a retry never reorders or repeats a range. Local files are read in
order with one ``pread`` per joined range: a disk gains nothing from
requests in flight, and the page cache reads ahead.
"""

from __future__ import annotations

import collections
from collections.abc import Generator, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import NamedTuple

from tfrecord_torch._threads import OwnedPool
from tfrecord_torch.io.files import on_fsspec_loop
from tfrecord_torch.io.pool import REQUEST_THREADS, Reader

__all__ = ["IN_FLIGHT", "MERGE_RATIO", "Request", "iter_ranges", "plan_requests", "read_many", "read_ranges"]

# small records far apart would otherwise be joined across gaps hundreds of times their size
MERGE_RATIO = 4  # the most bytes a joined request of a URL reads per byte of the ranges it covers
IN_FLIGHT = 32  # requests of one iterator in flight at once
_LOCAL_REQUEST = 16 << 20  # the longest joined read of a local file


class Request(NamedTuple):
    """One read covering the asked ranges ``first`` to ``stop - 1``: bytes
    [start, end) of the file."""

    start: int
    end: int
    first: int
    stop: int


def plan_requests(offsets: Sequence[int], sizes: Sequence[int], *, gap: int, longest: int,
                  ratio: float | None = None) -> list[Request]:
    """The reads that cover ``offsets[i], sizes[i]`` in the order given: a range
    joins the request before it when it starts at most ``gap`` bytes after that
    request's end, the request stays within ``longest`` bytes (a range
    longer than that is a request of its own) and, with a ``ratio``, within
    ``ratio`` times the bytes of the ranges it covers."""
    requests: list[Request] = []
    n = len(offsets)
    i = 0
    while i < n:
        start = offsets[i]
        end = start + sizes[i]
        used = sizes[i]
        stop = i + 1
        while stop < n and end <= offsets[stop] <= end + gap and offsets[stop] + sizes[stop] - start <= longest \
                and (ratio is None or offsets[stop] + sizes[stop] - start <= ratio * (used + sizes[stop])):
            end = offsets[stop] + sizes[stop]
            used += sizes[stop]
            stop += 1
        requests.append(Request(start, end, i, stop))
        i = stop
    return requests


def iter_ranges(reader: Reader, offsets: Sequence[int], sizes: Sequence[int], *, wait: bool = True,
                join: bool = True) -> Generator[bytes, None, None]:
    """The bytes of each range ``offsets[i], sizes[i]`` of the reader's file,
    in the order given (fewer at the end of the file).

    For a URL, the following requests are in flight while the caller handles
    a range (at most :data:`IN_FLIGHT` requests and the reader's budget's
    ``requests.in_flight`` bytes, at least one request); closing the iterator early drops the
    requests not started. ``join``: near ranges are read by one request
    (False: each range is a read of its own, the first bytes come after the
    first range). An error is raised where its range comes, after
    the ranges before it.
    """
    url = reader.remote(wait)
    budget = reader.budget.requests
    requests = plan_requests(offsets, sizes, gap=-1 if not join else budget.gap if url else 0,
                             longest=budget.longest if url else _LOCAL_REQUEST, ratio=MERGE_RATIO if url else None)
    if not url or len(requests) == 1:
        for request in requests:
            yield from _split(reader.read(request.start, request.end - request.start, wait), request, offsets, sizes)
        return
    flow = _flow([(reader, r) for r in requests], wait)
    try:
        for request, data in zip(requests, flow):
            yield from _split(data, request, offsets, sizes)
    finally:
        flow.close()


def read_many(reads: Sequence[tuple[Reader, Sequence[int], Sequence[int]]], *, far: int | None = None
              ) -> list[list[bytes]]:
    """:func:`read_ranges` of several files at once (``(reader, offsets,
    sizes)`` each), the requests of all of them in flight together (``far``:
    see :meth:`Reader.read`)."""
    out: list[list[bytes]] = []
    jobs: list[tuple[Reader, Request]] = []
    # each file's requests, planned once: a read in flight may turn a filling reader to the bucket
    # (its ratio then differs), and the bytes of the requests sent must be cut as they were planned
    planned: list[tuple[list[int], tuple[list[int], list[int]], list[Request]] | None] = []
    for reader, offsets, sizes in reads:
        if not reader.remote(wait=False):
            out.append(read_ranges(reader, offsets, sizes))
            planned.append(None)
            continue
        order = sorted(range(len(offsets)), key=offsets.__getitem__)
        ordered = ([offsets[i] for i in order], [sizes[i] for i in order])
        budget = reader.budget.requests
        requests = plan_requests(*ordered, gap=budget.gap, longest=budget.longest, ratio=_ratio(reader, far))
        jobs += [(reader, r) for r in requests]
        out.append([b""] * len(offsets))
        planned.append((order, ordered, requests))
    flow = _flow(jobs, wait=False, far=far)
    for slot, plan in enumerate(planned):
        if plan is None:
            continue
        order, ordered, requests = plan
        got = (piece for request, data in zip(requests, flow) for piece in _split(data, request, *ordered))
        for i, data in zip(order, got):
            out[slot][i] = data
    return out


def _ratio(reader: Reader, far: int | None) -> float | None:
    """The ratio bound of a file's joined requests. None for the first reads
    past a copy being filled (``far`` given): a request goes to the bucket
    only when it ends more than ``far`` past what the fill has written, so
    those records' requests stay joined, long, and wait for none of the
    fill's later ranges."""
    return None if far is not None and reader.filling() else MERGE_RATIO


def _flow(jobs: Sequence[tuple[Reader, Request]], wait: bool = True, far: int | None = None
          ) -> Generator[bytes, None, None]:
    """The bytes of each request, in order, the following ones in flight
    (``wait``, ``far``: see :meth:`Reader.read`), on the first reader's
    request threads (or threads of this flow's own, joined at its end),
    within the first reader's budget of bytes in flight."""
    owned = jobs[0][0].requests if jobs else None
    in_flight = jobs[0][0].budget.requests.in_flight if jobs else 0
    executor = owned if owned is not None else OwnedPool(min(REQUEST_THREADS, len(jobs)), "tfrecord_torch-read")
    flying: collections.deque[tuple[Request, Future]] = collections.deque()
    held = 0  # bytes of the requests in ``flying``
    pending = iter(jobs)
    following = next(pending, None)
    try:
        while following is not None or flying:
            while following is not None and (not flying or (len(flying) < IN_FLIGHT and held + _size(following[1])
                                                            <= in_flight)):
                reader, request = following
                flying.append((request, executor.submit(reader.read, request.start, _size(request), wait, far)))
                held += _size(request)
                following = next(pending, None)
            request, future = flying.popleft()
            data = future.result()
            held -= _size(request)
            yield data
    finally:
        for _, future in flying:
            future.cancel()
        # a read already running uses its reader, which goes back to its pool when this ends: a late
        # read could then close or reopen the descriptor under the next borrower (never on fsspec's
        # loop thread, where a read may be waiting for this very thread)
        waits = not on_fsspec_loop()
        if waits:  # a cancelled read counts as ended
            futures_wait([future for _, future in flying])
        if owned is None:
            executor.close(wait=waits)


def _size(request: Request) -> int:
    return request.end - request.start


def _split(data: bytes, request: Request, offsets: Sequence[int], sizes: Sequence[int]
           ) -> Generator[bytes, None, None]:
    if request.stop == request.first + 1:
        yield data
        return
    for i in range(request.first, request.stop):
        a = offsets[i] - request.start
        yield data[a:a + sizes[i]]


def read_ranges(reader: Reader, offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
    """:func:`iter_ranges` as a list, the ranges read in ascending offsets
    (so near ones join) and handed back in the order given."""
    order = sorted(range(len(offsets)), key=offsets.__getitem__)
    if all(a < b for a, b in zip(order, order[1:])):
        return list(iter_ranges(reader, offsets, sizes, wait=False))
    out: list[bytes] = [b""] * len(order)
    got = iter_ranges(reader, [offsets[i] for i in order], [sizes[i] for i in order], wait=False)
    for i, data in zip(order, got):
        out[i] = data
    return out
