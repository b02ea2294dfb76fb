"""Every thread the library starts has an owner that joins it: an iteration
ended any way a user can end it (exhausted, ``break``, an exception, ``del``
of the iterator, a suspended iterator collected) leaves no thread behind, in
every mode (local files, a bucket through the shard cache and by range
requests; per sample, batch mode, map-style; in the main process and in
DataLoader workers, forked and spawned).

The bucket is moto's S3 server on 127.0.0.1. The threads counted are the
library's, every one named ``tfrecord...`` (fsspec's event loop and the
server's request threads are not ours)."""

import gc
import threading
import time

import numpy as np
import pytest
from helpers import png_bytes
from torch.utils.data import DataLoader, IterableDataset

from tfrecord_torch import (
    Image,
    IndexedTFRecordDataset,
    Int64,
    RecordWriter,
    ShardCache,
    Source,
    TFRecordDataset,
    make_example,
)

from .test_remote import S3, with_bucket

SHARDS, PER_SHARD = 3, 40
FEATURES = {"id": Int64(), "image": Image()}
ENDINGS = ["exhausted", "break", "exception", "del", "suspended"]


@pytest.fixture(scope="module")
def s3():
    yield from with_bucket(S3())


def _write(path, k, **options):
    with RecordWriter(path, **options) as w:
        for i in range(PER_SHARD):
            pixels = np.full((8, 8, 3), (k * PER_SHARD + i) % 251, np.uint8)
            w.write(make_example({"id": k * PER_SHARD + i, "image": png_bytes(pixels)}))


@pytest.fixture(scope="module")
def places(s3, tmp_path_factory):
    """The same shards in a local folder and in the bucket: {"local": glob, "bucket": glob}."""
    folder = tmp_path_factory.mktemp("threads")
    for k in range(SHARDS):
        _write(str(folder / f"train-{k}.tfrecord"), k)
        _write(f"s3://bucket/threads/train-{k}.tfrecord", k, storage_options=s3.options)
    return {"local": str(folder / "train-*.tfrecord"), "bucket": "s3://bucket/threads/train-*.tfrecord"}


@pytest.fixture(autouse=True)
def index_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))


def make(kind, where, places, s3, tmp_path):
    """A dataset of ``kind`` over the shards at ``where`` ("local", "cache": the
    bucket through a shard cache, "ranges": the bucket by range requests)."""
    pattern = places["local" if where == "local" else "bucket"]
    remote = {} if where == "local" else {"storage_options": s3.options}
    cache = ShardCache(str(tmp_path / "shards")) if where == "cache" else None
    if kind == "map-style":
        return IndexedTFRecordDataset(pattern, features=FEATURES, cache=cache, **remote)
    source = {} if where == "local" else {"source": Source(cache=cache)}
    batching = {"batch_size": 8} if kind == "batch mode" else {}
    return TFRecordDataset(pattern, features=FEATURES, shuffle=True, seed=1, **batching, **source, **remote)


def loader(ds, kind, **kwargs):
    if kind == "batch mode":
        return DataLoader(ds, batch_size=None, **kwargs)
    return DataLoader(ds, batch_size=8, shuffle=kind == "map-style", **kwargs)


def end(iterable, ending):
    """Iterate over ``iterable`` and end it ``ending``'s way; nothing of it stays referenced."""
    if ending == "exhausted":
        for _ in iterable:
            pass
    elif ending == "break":
        for i, _ in enumerate(iterable):
            if i == 2:
                break
    elif ending == "exception":
        with pytest.raises(KeyError):
            for i, _ in enumerate(iterable):
                if i == 2:
                    raise KeyError("the user's own")
    elif ending == "del":
        it = iter(iterable)
        next(it)
        del it
    else:  # a suspended iterator, dropped and collected with others in a cycle
        it = iter(iterable)
        next(it)
        cycle = [it]
        cycle.append(cycle)
        del it, cycle
    gc.collect()


def threads() -> list[str]:
    """The library's threads alive now."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("tfrecord"))


def settled() -> list[str]:
    """The library's threads alive before a test, once those an earlier test in
    this process left ending on their own (a read on fsspec's loop thread does
    not wait for its pool) have ended: up to 5 s."""
    deadline = time.monotonic() + 5
    while threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return threads()


def _main_process_grid():
    """Every mode and ending; the fast set keeps each ending of per-sample
    range reads (the most threads) and each other mode's exhausted and
    raised endings by range reads, the slow set (CI) the rest of the grid."""
    for kind in ["per sample", "batch mode", "map-style"]:
        for where in ["local", "cache", "ranges"]:
            for ending in ENDINGS:
                fast = where == "ranges" and (kind == "per sample" or ending in ("exhausted", "exception"))
                yield pytest.param(kind, where, ending, id=f"{kind}-{where}-{ending}",
                                   marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize(("kind", "where", "ending"), list(_main_process_grid()))
def test_an_iteration_in_the_main_process_leaves_no_thread(places, s3, tmp_path, kind, where, ending):
    before = settled()
    ds = make(kind, where, places, s3, tmp_path)
    end(loader(ds, kind), ending)
    if kind == "map-style":  # the dataset owns its readers' threads across epochs, up to its close()
        end(loader(ds, kind), ending)
        ds.close()
    assert threads() == before


class ThreadsAtStart(IterableDataset):
    """``ds``'s items, each epoch led by the names of the library's threads
    alive in the worker when the epoch starts (the last epoch's iterator
    is gone by then)."""

    def __init__(self, ds):
        self.ds = ds

    def __iter__(self):
        yield threads()
        yield from self.ds


def _persistent_grid():
    """The fast set keeps per sample from the cache and batch mode by range
    reads, forked; the slow set (CI) every mode, place and start method."""
    for kind in ["per sample", "batch mode"]:
        for where in ["local", "cache", "ranges"]:
            for context in ["fork", "spawn"]:
                fast = context == "fork" and (kind, where) in {("per sample", "cache"), ("batch mode", "ranges")}
                yield pytest.param(kind, where, context, id=f"{kind}-{where}-{context}",
                                   marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize(("kind", "where", "context"), list(_persistent_grid()))
def test_a_persistent_worker_starts_each_epoch_with_no_thread_of_the_last(places, s3, tmp_path, kind, where,
                                                                          context):
    ds = make(kind, where, places, s3, tmp_path)
    probe = DataLoader(ThreadsAtStart(ds), batch_size=None, num_workers=2, persistent_workers=True,
                       multiprocessing_context=context)
    for ending in ("break", "exhausted", "break"):
        it = iter(probe)
        assert next(it) == [], ending  # one worker's probe
        assert next(it) == [], ending  # the other's
        for i, _ in enumerate(it):
            if ending == "break" and i == 2:
                break
        del it
        gc.collect()
