"""A thread pool with one owner.

Every pool the library starts is an :class:`OwnedPool` held by one object
(a reader pool's range requests, a decode engine), which closes it when its
own work ends: ``close()`` joins the threads, so an iteration that ended,
however it ended, leaves none behind. The threads start at the first
:meth:`~OwnedPool.submit`, in the process that submits: a DataLoader worker
forked from a parent never uses (nor shuts down) the parent's threads, which
do not exist in the child. A submit after ``close()`` starts the pool again.
(The bottom layer: imports nothing of ours.)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["OwnedPool"]

T = TypeVar("T")


class OwnedPool:
    """Up to ``threads`` threads named ``name_N``, started on demand and joined by :meth:`close`.

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
