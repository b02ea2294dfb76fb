"""Threads with one owner: a pool (:class:`OwnedPool`), a producer loop
(:class:`Producer`) and a team of loops on shared state (:class:`Team`).

Every pool the library starts is an :class:`OwnedPool` held by one object
(a reader pool's range requests, a decode engine), which closes it when its
own work ends: ``close()`` joins the threads, so an iteration that ended,
however it ended, leaves none behind. The threads start at the first
:meth:`~OwnedPool.submit`, in the process that submits: a DataLoader worker
forked from a parent never uses (nor shuts down) the parent's threads, which
do not exist in the child. A submit after ``close()`` starts the pool again.

:class:`Producer` is the one loop for "produce ahead in the background": one
thread runs a source ahead of its consumer, bounded by a count or by bytes;
the items and the source's error come out in order, and :meth:`Producer.close`
stops the thread, closes the source on it and joins it. :class:`Team` runs
one loop on several threads (the per-sample path's decode threads, each
taking the next group of records and decoding it), stopped and joined by
its owner. (The bottom layer: imports nothing of ours.)
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

__all__ = ["OwnedPool", "Producer", "Team", "may_wait_for", "on_fsspec_loop"]

T = TypeVar("T")


class OwnedPool:
    """Up to ``threads`` threads named ``name_N``, started on demand and joined by :meth:`close`.

    As a context manager, the pool of one block of work: the block's end
    closes it, letting what was submitted finish, however the block ends.

    Args:
        threads: the most threads, or a function giving it when the pool starts.
        name: the threads' name prefix (what ``threading.enumerate()`` shows).
    """

    def __init__(self, threads: int | Callable[[], int], name: str) -> None:
        self._size, self.name = threads, name
        self._pool: ThreadPoolExecutor | None = None
        self._pid = -1  # the process whose threads ``_pool`` runs
        self._count = 0
        self._lock = threading.Lock()

    def _running(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pid != os.getpid():  # never started, closed, or a forked child's
            self._count = self._size() if callable(self._size) else self._size
            self._pool = ThreadPoolExecutor(self._count, thread_name_prefix=self.name)
            self._pid = os.getpid()
        return self._pool

    def start(self) -> int:
        """Start the pool in this process if it is not running; its most threads."""
        with self._lock:
            self._running()
            return self._count

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on a thread of the pool (starting it if needed)."""
        with self._lock:  # never handed to a pool that close() is shutting down
            return self._running().submit(fn, *args, **kwargs)

    def map(self, fn: Callable[[Any], T], items: Iterable[Any]) -> Iterator[T]:
        """``fn`` of each item on the pool's threads, submitted now; the results
        in order. An error comes out in its item's turn, and the items not yet
        begun are then cancelled (``ThreadPoolExecutor.map``)."""
        with self._lock:
            return self._running().map(fn, items)

    def __enter__(self) -> OwnedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def threads(self) -> int:
        """The most threads of the running pool (0 when it is not running in this process)."""
        with self._lock:
            return self._count if self._pool is not None and self._pid == os.getpid() else 0

    def close(self, wait: bool = True) -> None:
        """Let the work submitted finish, then end the threads and join them
        (not when called from one of them, nor with ``wait=False``: they end
        on their own once the work is done)."""
        with self._lock:
            pool, self._pool = self._pool, None
            ours = self._pid == os.getpid()
        if pool is None or not ours:  # a forked child: the parent's pool has no threads here
            return
        own_thread = threading.current_thread().name.startswith(self.name + "_")
        pool.shutdown(wait=wait and not own_thread)

    def __repr__(self) -> str:
        return f"OwnedPool({self.name!r}, threads={self.threads})"

    def __getstate__(self) -> dict:
        return {"_size": self._size, "name": self.name}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["_size"], state["name"])  # type: ignore[misc]

    def __del__(self) -> None:
        try:
            self.close(wait=False)
        except Exception:  # interpreter shutdown
            pass


def may_wait_for(thread: threading.Thread) -> bool:
    """Whether the calling thread may join ``thread``: not when it is that
    thread, nor when it is fsspec's event-loop thread. The garbage collector
    runs finalizers on whichever thread allocates, the loop's included; a
    close run there that waited for a thread waiting on that loop for a
    request would wait forever. Such a close only tells the thread to stop."""
    return thread is not threading.current_thread() and not on_fsspec_loop()


def on_fsspec_loop() -> bool:
    """Whether the calling thread is fsspec's event-loop thread, which must
    never wait for work that may need that loop (see :func:`may_wait_for`)."""
    asyn = sys.modules.get("fsspec.asyn")
    return asyn is not None and asyn.iothread[0] is threading.current_thread()


_END = object()


class _Raised:
    """The source raised: the error comes out after the items before it."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Channel:
    """What the producer thread and the consumer share. The thread holds this,
    not the :class:`Producer`, so a dropped producer is collected and stops it."""

    def __init__(self, limit: int, settle: float) -> None:
        self.limit, self.settle = limit, settle
        self.cond = threading.Condition()
        self.items: collections.deque = collections.deque()  # (item, weight), a _Raised, or _END
        self.held = 0  # weight of the items waiting and of the one taken last, until it is let go
        self.taken = 0  # the weight of the item taken last, not yet let go
        self.stopped = False
        self.waiting = False  # the consumer waits in take() for an item
        self.freed = 0.0  # when the consumer last made room (time.monotonic())

    def produce(self, source: Iterator, weight: Callable[[Any], int] | None) -> None:
        try:
            while True:
                with self.cond:
                    full = self.held >= self.limit
                    while self.held >= self.limit and not self.stopped:
                        self.cond.wait()
                    if full and self.settle:
                        self._settle()
                    if self.stopped:
                        return
                try:
                    item = next(source)
                    w = 1 if weight is None else weight(item)
                except StopIteration:
                    self._put(_END, 0)
                    return
                except BaseException as e:  # noqa: BLE001 - every error is the consumer's, in its turn
                    self._put(_Raised(e), 0)
                    return
                self._put(item, w)
        finally:
            close = getattr(source, "close", None)
            if close is not None:  # a generator's finally runs on the thread it ran on
                close()

    def _settle(self) -> None:
        """With the lock held: wait until ``settle`` seconds after the consumer
        made room, unless it is waiting for an item (or stops us)."""
        deadline = self.freed + self.settle
        while not self.stopped and not self.waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.cond.wait(left)

    def _put(self, item: object, w: int) -> None:
        with self.cond:
            if self.stopped:
                return
            self.held += w
            self.items.append((item, w))
            self.cond.notify_all()

    def let_go(self) -> None:
        with self.cond:
            self.held -= self.taken
            self.taken = 0
            self.freed = time.monotonic()
            self.cond.notify_all()

    def take(self) -> object:
        with self.cond:
            self.held -= self.taken  # the consumer is done with the item it took before
            self.taken = 0
            self.freed = time.monotonic()
            self.waiting = not self.items  # a settling producer goes at once
            self.cond.notify_all()
            while not self.items:
                self.cond.wait()
            self.waiting = False
            item, self.taken = self.items.popleft()
        return item

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.items.clear()
            self.held = self.taken = 0
            self.items.append((_END, 0))  # a consumer waiting in take() ends
            self.cond.notify_all()


class Producer(Generic[T]):
    """The items of ``source``, produced on one thread ahead of the consumer.

    The thread asks ``source`` for another item only while the items produced
    and not yet let go weigh less than ``limit``: an item counts from when it
    is produced until the consumer calls :meth:`taken` or takes the next one.
    Without ``weight`` each item weighs 1 (at most ``limit`` items ahead);
    with it, an item's bytes (the items held stay under ``limit`` plus one).
    The items come out in order; an error of ``source`` comes out where it
    was raised, after the items before it, and ends the iteration.

    The thread starts at :meth:`start` or the first ``next()``, in the process
    that iterates (a forked DataLoader worker starts its own). It ends when
    ``source`` is exhausted or raises, or at :meth:`close`, which waits for
    the item being produced, closes ``source`` on the thread and joins it
    (not from the thread itself, nor from fsspec's loop: :func:`may_wait_for`).
    A producer dropped without :meth:`close` tells its thread to stop.

    Args:
        source: the items, in order; ``next()`` on it does the work.
        name: the thread's name (``tfrecord_torch-...``).
        limit: the most items (or bytes, with ``weight``) ahead, >= 1.
        weight: an item's size in bytes; None: each item counts 1.
        settle: once the thread has waited for room, it waits this many
            seconds more after the consumer made it (unless the consumer
            waits for an item), so that its work starts after the
            consumer's call returns, not during it (0: at once).

    Example:
        >>> with Producer(iter("ab"), name="tfrecord_torch-doc", limit=1) as items:
        ...     list(items)
        ['a', 'b']
    """

    def __init__(self, source: Iterator[T], *, name: str, limit: int,
                 weight: Callable[[T], int] | None = None, settle: float = 0.0) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit!r}")
        self._source, self._weight, self.name = source, weight, name
        self._channel = _Channel(limit, settle)
        self._thread: threading.Thread | None = None
        self._done = False

    def start(self) -> Producer[T]:
        """Start the thread now (the first ``next()`` starts it otherwise)."""
        if self._thread is None and not self._done:
            self._thread = threading.Thread(target=self._channel.produce, args=(self._source, self._weight),
                                            name=self.name, daemon=True)
            self._thread.start()
        return self

    def __iter__(self) -> Producer[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        self.start()
        item = self._channel.take()
        if item is _END:
            self._finish()
            raise StopIteration
        if isinstance(item, _Raised):
            self._finish()
            raise item.error
        return item  # type: ignore[return-value]

    def taken(self) -> None:
        """The consumer is done with the item it took last: the thread may
        produce in its room now rather than at the next ``next()``."""
        self._channel.let_go()

    @property
    def alive(self) -> bool:
        """Whether the thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def _finish(self) -> None:
        self._done = True
        if self._thread is not None and may_wait_for(self._thread):
            self._thread.join()

    def close(self) -> None:
        """Stop the thread (after the item it is producing), close ``source``
        on it and wait for it; items not taken are dropped."""
        self._done = True
        self._channel.stop()
        if self._thread is None:  # never started: the source is closed here
            close = getattr(self._source, "close", None)
            if close is not None:
                close()
        elif may_wait_for(self._thread):
            self._thread.join()

    def __enter__(self) -> Producer[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._channel.stop()  # no join: the thread ends after its current item
        except Exception:  # interpreter shutdown
            pass


class Team:
    """``threads`` threads named ``name_N``, each running ``run()`` once, for
    work that loops on shared state rather than taking tasks; started by
    :meth:`start`, joined by :meth:`close`, which first calls ``stop()`` (it
    must make every ``run()`` return soon: wake its waits, end its loop).

    Daemon threads: a team whose owner never closed it (an iterator left open
    at the interpreter's exit) waits on its shared state, and must not hold
    the exit as a pool's threads would (a pool joins its threads at exit).
    The owner closes it however its work ends, so none outlives that work.
    """

    def __init__(self, threads: int, name: str, run: Callable[[], None], stop: Callable[[], None]) -> None:
        self.name, self._count, self._run, self._stop = name, threads, run, stop
        self._threads: list[threading.Thread] = []

    def start(self) -> Team:
        """Start the threads (once)."""
        if not self._threads:
            self._threads = [threading.Thread(target=self._run, name=f"{self.name}_{k}", daemon=True)
                             for k in range(self._count)]
            for thread in self._threads:
                thread.start()
        return self

    def close(self) -> None:
        """``stop()``, then join the threads (not from one of them, nor from
        fsspec's loop: a finalizer run there must not wait for a thread that
        may wait for it; they end on their own once stopped)."""
        self._stop()
        threads, self._threads = self._threads, []
        if threading.current_thread() in threads or on_fsspec_loop():
            return
        for thread in threads:
            if thread.is_alive():  # not one that failed to start
                thread.join()
