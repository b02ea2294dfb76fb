"""The reader pool and random access from many threads and forked processes: every record is
the right one (the pool once closed descriptors that other threads were reading)."""

import multiprocessing
import threading

import numpy as np
import pytest
from helpers import write_shards

from tfrecord_torch import IndexedReader, IndexedTFRecordDataset, Int64, load_index, parse_example
from tfrecord_torch.io.pool import ReaderPool
from tfrecord_torch.records.framing import parse_frame


@pytest.fixture
def shards(tmp_path):
    paths = write_shards(tmp_path, [40] * 24)  # more shards than the pool keeps open
    for p in paths:
        IndexedReader(p)  # writes nothing; builds the index in memory
    return [str(p) for p in paths]


def _expected(paths):
    """(path, offset, size, id) of every record."""
    out = []
    from tfrecord_torch import build_index

    next_id = 0
    for p in paths:
        index = load_index(build_index(p))
        for offset, size in index.tolist():
            out.append((p, offset, size, next_id))
            next_id += 1
    return out


def _in_threads(work, n: int = 8) -> None:
    """Run ``work(seed)`` in ``n`` threads at once and wait for them."""
    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _check_reads(pool, jobs, errors):
    for path, offset, size, want in jobs:
        payload = parse_frame(pool.read(path, offset, size), name=path, offset=offset, record=0)
        got = int(parse_example(payload)["id"][0])
        if got != want:
            errors.append((path, offset, want, got))


def test_pool_from_8_threads_reads_every_record_right(shards):
    records = _expected(shards)
    pool = ReaderPool(limit=4)  # far fewer idle readers than shards: eviction under load
    rng = np.random.default_rng(0)
    errors: list = []
    threads = []
    for _ in range(8):
        order = rng.permutation(len(records)).tolist()
        jobs = [records[i] for i in order] * 3
        threads.append(threading.Thread(target=_check_reads, args=(pool, jobs, errors)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert pool._count <= 4
    pool.close()


def _child(pool, jobs, queue):
    errors: list = []
    _check_reads(pool, jobs, errors)
    threads = [threading.Thread(target=_check_reads, args=(pool, jobs[i::4], errors)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put(errors)


def test_pool_in_forked_children_after_the_parent_used_it(shards):
    records = _expected(shards)
    pool = ReaderPool(limit=4)
    _check_reads(pool, records[:50], [])  # the parent holds open descriptors when it forks
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    children = [ctx.Process(target=_child, args=(pool, records[i::2], queue)) for i in range(2)]
    for c in children:
        c.start()
    results = [queue.get(timeout=120) for _ in children]
    for c in children:
        c.join(timeout=60)
        assert c.exitcode == 0
    assert results == [[], []]
    errors: list = []
    _check_reads(pool, records, errors)  # the parent's pool still works
    assert errors == []


def test_borrowed_readers_are_not_shared_and_come_back(tmp_path):
    (path,) = write_shards(tmp_path, [3])
    pool = ReaderPool(limit=2)
    with pool.borrow(str(path)) as a, pool.borrow(str(path)) as b:
        assert a is not b  # two borrowers never share one reader
    assert pool._count == 2
    with pool.borrow(str(path)) as c:
        assert c in (a, b)  # an idle reader is lent again
    pool.close()
    assert pool._count == 0


def test_map_style_dataset_from_8_threads(shards):
    ds = IndexedTFRecordDataset(shards, features={"id": Int64()})
    n = len(ds)
    errors: list = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in rng.integers(0, n, 600).tolist():
            got = int(ds[i]["id"])
            if got != i:
                errors.append((i, got))

    _in_threads(work)
    assert errors == []


def test_indexed_reader_from_8_threads(shards):
    reader = IndexedReader(shards[3])
    first = 3 * 40
    errors: list = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in rng.integers(0, len(reader), 300).tolist():
            got = int(parse_example(reader[i])["id"][0])
            if got != first + i:
                errors.append((i, got))

    _in_threads(work)
    assert errors == []
