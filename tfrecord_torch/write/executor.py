"""Running shard tasks on a ``concurrent.futures.Executor``, with retries and a
progress bar over shards.

Any executor works: this process (serial), a ``ProcessPoolExecutor`` (made
here with the dataset handed to each forked worker once, or the user's), or a
Dask ``distributed.Client(...).get_executor()`` for a cluster. A task that
raises is submitted again (as a new task: Dask would otherwise return the
same failed result) up to ``retries`` times; bad samples (``TypeError``,
``ValueError``, ``TFRecordError``) fail at once, as a retry would fail again.
A worker that dies mid-task is the executor's to handle: Dask reruns the task
elsewhere; a broken process pool raises.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator
from typing import Any

from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.write.task import ShardResult, ShardTask, use_dataset, write_shard

__all__ = ["InlineExecutor", "run_tasks", "shard_executor"]

log = logging.getLogger(__name__)
_FINAL = (TypeError, ValueError, TFRecordError)  # bad input: a retry would fail the same way


class InlineExecutor(cf.Executor):
    """An executor that runs each task in this process when it is submitted."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        future: cf.Future = cf.Future()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:
            if not isinstance(e, Exception):
                raise  # KeyboardInterrupt, SystemExit: stop now
            future.set_exception(e)
        return future


@contextlib.contextmanager
def shard_executor(dataset: Any, num_workers: int) -> Iterator[cf.Executor]:
    """This process (``num_workers=0``) or a pool of ``num_workers`` processes,
    each given ``dataset`` once (forked where possible: nothing is pickled)."""
    if num_workers == 0:
        use_dataset(dataset)
        try:
            yield InlineExecutor()
        finally:
            use_dataset(None)  # do not keep the dataset alive after the conversion
        return
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = cf.ProcessPoolExecutor(num_workers, mp_context=multiprocessing.get_context(method),
                                  initializer=_pool_worker, initargs=(dataset, os.getpid()))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _pool_worker(dataset: Any, parent: int) -> None:
    """A pool worker's start: keep the dataset, and exit if the parent dies
    (a killed conversion must not leave workers behind, still writing)."""
    import threading
    import time

    use_dataset(dataset)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="tfrecord_torch-parent-watch", daemon=True).start()


def run_tasks(tasks: list[ShardTask], executor: cf.Executor, *, retries: int = 2, progress: bool = True,
              total: int | None = None, done: int = 0) -> dict[int, ShardResult]:
    """Run every task on ``executor``; results by shard index.

    Args:
        tasks: one per shard still to write.
        executor: where they run.
        retries: resubmissions of a task that raised (not for bad input).
        progress: a progress bar over shards.
        total, done: the split's shard count and how many were already
            complete (for the bar).

    Raises:
        The first task's exception that is final; the tasks not yet started
        are cancelled (finished shards stay, for a rerun to keep).
    """
    from tqdm import tqdm

    inline = isinstance(executor, InlineExecutor)
    queue = list(reversed(tasks))
    pending: dict[cf.Future, ShardTask] = {}
    results: dict[int, ShardResult] = {}
    bar = tqdm(total=total if total is not None else len(tasks), initial=done, unit="shard",
               desc="converting", disable=not progress)
    try:
        while queue or pending:
            while queue and (not inline or not pending):  # inline: one at a time, so the bar moves
                task = queue.pop()
                pending[executor.submit(write_shard, task)] = task
            finished, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for future in finished:
                task = pending.pop(future)
                try:
                    result = future.result()
                except Exception as e:
                    if isinstance(e, _FINAL) or task.attempt >= retries:
                        log.error("shard %d of %d failed (attempt %d): %s; finished shards are kept and a "
                                  "rerun writes only the missing ones", task.spec.index, task.spec.num_shards,
                                  task.attempt + 1, e)
                        raise
                    log.warning("shard %d of %d failed (attempt %d of %d), retrying: %r", task.spec.index,
                                task.spec.num_shards, task.attempt + 1, retries + 1, e)
                    queue.append(dataclasses.replace(task, attempt=task.attempt + 1))
                    continue
                results[result.index] = result
                bar.update(1)
                bar.set_postfix(records=sum(r.records for r in results.values()), refresh=False)
    finally:
        for future in pending:
            future.cancel()
        bar.close()
    return results


def default_workers(length: int, num_shards: int, threshold: int) -> int:
    """Processes for ``num_workers=None``: one per core (at most one per shard)
    for ``threshold`` samples or more, else 0 (this process)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if length < threshold or cores < 2 or num_shards < 2:
        return 0
    return min(cores, num_shards)
