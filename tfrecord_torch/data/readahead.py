"""Read-ahead: a background thread takes items from a source (fetching them)
while the consumer decodes the ones before.

The items come out in the source's order; an error the source raises comes
out where it was raised, after the items before it. Memory is bounded: the
thread asks the source for another item only while the items fetched and not
yet done with (those waiting and the one the consumer took last, until it
asks for the next) weigh less than ``limit`` bytes, so they stay under
``limit`` plus one item. An item heavier than ``limit`` is not fetched while
the consumer holds another: no overlap then, but never two such items. The thread stops, and the
source is closed in it, when the consumer closes the iterator or drops it.
A thread is started by the first ``next()`` (or :meth:`ReadAhead.start`), in
the process that iterates (a forked DataLoader worker starts its own).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

from tfrecord_torch._threads import Producer

__all__ = ["FetchAhead", "ReadAhead", "fetch_ahead"]

T = TypeVar("T")
U = TypeVar("U")
_END = object()


class ReadAhead(Generic[T]):
    """The items of ``source``, fetched by a background thread ahead of use:
    the library's one producer loop (:class:`~tfrecord_torch._threads.Producer`),
    bounded by bytes.

    Args:
        source: the items, in order (an iterator whose ``next()`` does the fetching).
        weight: an item's size in bytes, for the bound.
        limit: bytes of items fetched ahead, the consumer's current one
            included (see the module docstring): its owner's (a read
            budget's ``read_ahead``, or a stream's read-ahead).

    Example:
        >>> ahead = ReadAhead(iter([b"ab", b"c"]), weight=len, limit=1 << 20)
        >>> list(ahead)
        [b'ab', b'c']
    """

    def __init__(self, source: Iterator[T], *, weight: Callable[[T], int], limit: int) -> None:
        self._producer: Producer[T] = Producer(source, name="tfrecord_torch-readahead", limit=limit, weight=weight)

    def __iter__(self) -> ReadAhead[T]:
        return self

    def start(self) -> None:
        """Start the thread now (the first ``next()`` starts it otherwise)."""
        self._producer.start()

    def __next__(self) -> T:
        return next(self._producer)

    def close(self) -> None:
        """Stop the thread (after the item it is fetching) and close the source."""
        self._producer.close()


class _Local:
    """A unit the read-ahead thread hands back to the consumer (and stops)."""

    def __init__(self, unit: object) -> None:
        self.unit = unit


class FetchAhead(Generic[T]):
    """``fetch(unit)`` of each of ``units``, in order. A run of units for which
    ``remote(unit)`` holds (they wait on the network) is fetched ahead by a
    :class:`ReadAhead` thread; the thread stops at the next other unit, which
    is fetched in the consumer's thread when its turn comes, as are the ones
    after it until a remote one (a local read on a thread would only fight
    the consumer for the GIL). Errors come out in place; the thread stops
    when the iterator is closed or dropped. ``limit``: the thread's bound,
    as :class:`ReadAhead`'s.

    The first unit is fetched from the first ``next()``, or from
    :meth:`begin` if that comes first (a reader that can start its first
    request before it is asked for an item: a DataLoader worker, between its
    start and its first index).

    Example:
        >>> list(FetchAhead(iter([1, 2, 3]), lambda u: u * 10, remote=lambda u: u == 2, weight=lambda x: 1,
        ...                 limit=1 << 20))
        [10, 20, 30]
    """

    def __init__(self, units: Iterator[U], fetch: Callable[[U], T], *, remote: Callable[[U], bool],
                 weight: Callable[[T], int], limit: int) -> None:
        self._units, self._fetch, self._remote = units, fetch, remote
        self._weight, self._limit = weight, limit
        self._ahead: ReadAhead | None = None
        self._first: Any = None  # the first unit once begun (_END: none), until the items take it
        self._begun = False
        self._items = self._run()

    def begin(self) -> FetchAhead[T]:
        """Take the first unit now and, if it is remote, start fetching it on
        the thread (a local one is fetched at the first ``next()``)."""
        if not self._begun:
            self._begun = True
            self._first = next(self._units, _END)
            if self._first is not _END and self._remote(self._first):
                self._ahead = self._run_ahead(self._first)
                self._ahead.start()
        return self

    def __iter__(self) -> FetchAhead[T]:
        return self

    def __next__(self) -> T:
        return next(self._items)

    def close(self) -> None:
        """Stop the thread (after the unit it fetches) and close the units."""
        self._items.close()
        self._stop()

    def _stop(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.close()

    def _run_ahead(self, first: U) -> ReadAhead:
        weight = self._weight
        return ReadAhead(_remote_run(first, self._units, self._fetch, self._remote),
                         weight=lambda item: 0 if isinstance(item, _Local) else weight(item), limit=self._limit)

    def _run(self) -> Generator[T, None, None]:
        self.begin()
        pending, self._first = self._first, None
        try:
            while pending is not _END:
                if self._ahead is None:
                    if not self._remote(pending):
                        yield self._fetch(pending)
                        pending = next(self._units, _END)
                        continue
                    self._ahead = self._run_ahead(pending)
                pending = _END
                for item in self._ahead:
                    if isinstance(item, _Local):
                        pending = item.unit
                        break
                    yield item
                self._stop()  # the thread has ended (or ends after the unit it fetches)
        finally:
            self._stop()


def fetch_ahead(units: Iterator[U], fetch: Callable[[U], T], *, remote: Callable[[U], bool],
                weight: Callable[[T], int], limit: int) -> FetchAhead[T]:
    """A :class:`FetchAhead` of ``units``.

    Example:
        >>> list(fetch_ahead(iter([1, 2, 3]), lambda u: u * 10, remote=lambda u: u == 2, weight=lambda x: 1,
        ...                  limit=1 << 20))
        [10, 20, 30]
    """
    return FetchAhead(units, fetch, remote=remote, weight=weight, limit=limit)


def _remote_run(first: Any, units: Iterator, fetch: Callable, remote: Callable) -> Iterator:
    """The fetched units from ``first`` on while they are remote, then the
    first other unit handed back (the read-ahead thread runs this)."""
    unit = first
    while True:
        yield fetch(unit)
        unit = next(units, _END)
        if unit is _END:
            return
        if not remote(unit):
            yield _Local(unit)
            return
