"""Copying shards ahead of a reader (io/copies.py CopyAhead): an epoch read to
its end lets the copy in progress end; a reader that stops early gives it up.
Background fills (ShardCopies.open_now) of two readers asking for the same
shards copy different shards at once, each shard once."""

import os
import threading

import fsspec
import pytest

from tfrecord_torch.io import copies as copies_module
from tfrecord_torch.io import files as fs
from tfrecord_torch.io import shardcache
from tfrecord_torch.io.budget import FillBudget, ReadBudget
from tfrecord_torch.io.copies import CopyAhead, ShardCopies
from tfrecord_torch.io.shardcache import ShardCache, shard_cache_usage

FOUR_RANGES = ReadBudget(fill=FillBudget(chunk=1000))  # a fill of the held bucket's object asks for 4 ranges


@pytest.fixture
def held_bucket(monkeypatch):
    """A 4-range object in memory (filled with :data:`FOUR_RANGES`) whose
    first range request waits for ``go``."""
    url = "memory://copyahead/a.tfrecord"
    data = os.urandom(4000)
    fsspec.filesystem("memory").pipe_file(url, data)
    began, go, real = threading.Event(), threading.Event(), fs.read_range

    def held(u, start, end, storage_options=None):
        if start == 0:
            began.set()
            assert go.wait(30)
        return real(u, start, end, storage_options)

    monkeypatch.setattr(fs, "read_range", held)
    yield url, data, began, go
    fsspec.filesystem("memory").rm_file(url)


def _close_while_copying(url, tmp_path, began, go, finish):
    cache = ShardCache(str(tmp_path / "shards"))
    copies = ShardCopies(cache, {url: fs.size_and_version(url)}, budget=FOUR_RANGES)
    ahead = CopyAhead(copies, [url], ahead=1)
    assert began.wait(30)  # the copy is under way

    def close():  # as a read session closes them: the copying ahead, then the copies' fills
        ahead.close(finish=finish)
        copies.close(finish=finish)

    closing = threading.Thread(target=close)
    closing.start()
    closing.join(0.2)
    go.set()
    closing.join(30)
    assert not closing.is_alive()
    return cache


def test_an_epoch_read_to_its_end_lets_the_copy_in_progress_end(held_bucket, tmp_path):
    # Before, close() always gave the copy up, and the reader's own background
    # fill, waiting on the same lock, began it again: a second download.
    url, data, began, go = held_bucket
    cache = _close_while_copying(url, tmp_path, began, go, finish=True)
    assert shard_cache_usage(cache) == (1, len(data))


def test_a_reader_that_stops_early_gives_the_copy_up(held_bucket, tmp_path):
    url, data, began, go = held_bucket
    cache = _close_while_copying(url, tmp_path, began, go, finish=False)
    assert shard_cache_usage(cache) == (0, 0)


def test_no_thread_waits_for_itself_or_from_the_event_loop():
    import fsspec.asyn

    from tfrecord_torch.io.files import may_wait_for

    other = threading.Thread(target=lambda: None)
    assert may_wait_for(other)
    assert not may_wait_for(threading.current_thread())
    on_loop = fsspec.asyn.sync(fsspec.asyn.get_loop(), _ask, other)
    assert on_loop is False


async def _ask(thread):
    from tfrecord_torch.io.files import may_wait_for

    return may_wait_for(thread)


def test_two_readers_asking_for_the_same_shards_copy_different_ones(tmp_path, monkeypatch):
    # Two ShardCopies of one cache stand for two DataLoader workers of a shuffle (their
    # entry locks are flocks of separate open files, as between processes); each copies
    # one shard at a time. The second reader copies the shard nobody copies yet rather
    # than waiting for the first reader's fill of the shard both asked for first.
    monkeypatch.setattr(copies_module, "FILLS", 1)
    urls = [f"memory://copyshare/{k}.tfrecord" for k in range(2)]
    for url in urls:
        fsspec.filesystem("memory").pipe_file(url, os.urandom(3000))
    began, go, real = threading.Event(), threading.Event(), fs.read_range

    def held(u, start, end, storage_options=None):
        if u == urls[0]:
            began.set()
            assert go.wait(60)
        return real(u, start, end, storage_options)

    monkeypatch.setattr(fs, "read_range", held)
    fills: list[str] = []
    real_fill = shardcache._fill

    def fill(url, *args, **kwargs):
        fills.append(url)
        return real_fill(url, *args, **kwargs)

    monkeypatch.setattr(shardcache, "_fill", fill)
    cache = ShardCache(str(tmp_path / "shards"))
    stats = {url: fs.size_and_version(url) for url in urls}
    first, second = ShardCopies(cache, stats), ShardCopies(cache, stats)
    try:
        assert all(first.open_now(url) is None for url in urls)  # nothing copied yet: filled in the background
        assert began.wait(30)  # the first reader copies urls[0], held mid-copy
        assert all(second.open_now(url) is None for url in urls)
        other_done = _wait_for(lambda: second.held(urls[1]), 20)  # copied by the second reader meanwhile
        go.set()
        first.close(finish=True)
        second.close(finish=True)
    finally:
        go.set()
        for url in urls:
            fsspec.filesystem("memory").rm_file(url)
    assert other_done
    assert sorted(fills) == urls  # each shard copied once
    assert shard_cache_usage(cache) == (2, 6000)


def _wait_for(condition, seconds: float = 30) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def gated_objects(monkeypatch):
    """Eight 3,000-byte objects in memory whose fills' range requests wait
    for ``go``; ``flying`` counts the requests under way, ``peak`` the most
    at once."""
    urls = [f"memory://copygate/{k}.tfrecord" for k in range(8)]
    for url in urls:
        fsspec.filesystem("memory").pipe_file(url, os.urandom(3000))
    go, lock, real = threading.Event(), threading.Lock(), fs.read_range
    state = {"flying": 0, "peak": 0}

    def gated(u, start, end, storage_options=None):
        with lock:
            state["flying"] += 1
            state["peak"] = max(state["peak"], state["flying"])
        try:
            assert go.wait(60)
            return real(u, start, end, storage_options)
        finally:
            with lock:
                state["flying"] -= 1

    monkeypatch.setattr(fs, "read_range", gated)
    yield urls, go, state
    go.set()
    for url in urls:
        fsspec.filesystem("memory").rm_file(url)


def _copy_ahead_held(urls, tmp_path, ahead, least):
    """A CopyAhead (``ahead`` shards, ``least`` bytes) over ``urls``, before the reader began."""
    cache = ShardCache(str(tmp_path / "shards"))
    copies = ShardCopies(cache, {url: fs.size_and_version(url) for url in urls})
    return cache, copies, CopyAhead(copies, urls, ahead=ahead, least=least)


def test_small_shards_are_copied_ahead_several_at_once(gated_objects, tmp_path):
    # Before, the thread copied one shard after another: over a bucket of small
    # shards, a round trip per shard held the reader (64 shards of 2.5 MB read in
    # order through the cache took 3.7 s; the bare client fetched them in 1.0 s).
    urls, go, state = gated_objects
    cache, copies, ahead = _copy_ahead_held(urls, tmp_path, ahead=1, least=1 << 20)  # the 8 shards hold 24,000 bytes
    try:
        ahead.began([urls[0]])  # the reader's first read
        assert not _wait_for(lambda: state["flying"] > 1, 0.5)  # its copies one at a time: it has the bucket alone
        ahead.began([urls[0]])  # its second read
        assert _wait_for(lambda: state["flying"] == copies.fills, 20)  # as many fills at once as the copies run
        go.set()
        assert _wait_for(lambda: shard_cache_usage(cache)[0] == len(urls), 20)  # all copied ahead
    finally:
        go.set()
        ahead.close(finish=True)
        copies.close(finish=True)
    assert shard_cache_usage(cache) == (len(urls), 3000 * len(urls))
    assert state["peak"] == copies.fills


def test_large_shards_are_copied_ahead_one_at_a_time(gated_objects, tmp_path):
    # Shards of least bytes or more are copied one after another, however many
    # are asked for ahead: a reader's first shard has the bucket to itself, not a
    # share of several fills (its first batch waited 0.1-0.2 s longer that way).
    urls, go, state = gated_objects
    cache, copies, ahead = _copy_ahead_held(urls, tmp_path, ahead=4, least=3000)
    try:
        ahead.began([urls[0]])
        ahead.began([urls[0]])  # past the reader's first read
        assert _wait_for(lambda: state["flying"] == 1, 20)
        assert not _wait_for(lambda: state["flying"] > 1, 0.5)
        go.set()
        assert _wait_for(lambda: shard_cache_usage(cache)[0] >= 1, 20)
    finally:
        go.set()
        ahead.close()
        copies.close()
    assert state["peak"] == 1


def test_a_shard_asked_for_while_every_fill_thread_ends_is_still_copied(tmp_path, monkeypatch):
    # A fill thread that found the queue empty is still alive for a moment as it ends (longer
    # when it waits for the GIL). A shard asked for then, with every thread in that moment,
    # started no thread and was never copied: a reader following its copy waited for a fill
    # that would not begin.
    monkeypatch.setattr(copies_module, "FILLS", 1)
    urls = [f"memory://copyend/{k}.tfrecord" for k in range(2)]
    for url in urls:
        fsspec.filesystem("memory").pipe_file(url, os.urandom(2000))
    ending, ended = threading.Event(), threading.Event()
    take = copies_module._Filler._take

    def slow_end(self):
        url = take(self)
        if url is None and not ended.is_set():  # the first thread to end lingers as it ends
            ending.set()
            ended.wait(5)
        return url

    monkeypatch.setattr(copies_module._Filler, "_take", slow_end)
    cache = ShardCache(str(tmp_path / "shards"))
    copies = ShardCopies(cache, {url: fs.size_and_version(url) for url in urls})
    try:
        assert copies.open_now(urls[0]) is None  # copied in the background by the one thread
        assert ending.wait(20)  # which found nothing more to copy, and is ending
        assert copies.open_now(urls[1]) is None
        assert _wait_for(lambda: copies.held(urls[1]), 5)
    finally:
        ended.set()
        copies.close()
        for url in urls:
            fsspec.filesystem("memory").rm_file(url)
    assert shard_cache_usage(cache) == (2, 4000)


def test_a_copy_whose_read_comes_back_short_is_not_taken_for_damaged(tmp_path, monkeypatch):
    """damaged_copy compares a copy's bytes with the object's after a read
    error: a positioned read that returns fewer bytes than asked before the
    end (a cache folder on FUSE or NFS) is read on, not taken for bytes that
    differ, so a healthy copy is kept."""
    data = bytes(range(256)) * 64
    entry = tmp_path / "copy"
    entry.write_bytes(data)
    url = "s3://bucket/shard.tfrecord"
    monkeypatch.setattr(copies_module, "copy_in_use", lambda u: str(entry) if u == url else None)
    monkeypatch.setattr(fs, "read_range", lambda u, start, end, options=None: data[start:end])
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: real(fd, min(n, 1000), at))  # 1,000 bytes a call at most

    assert copies_module.damaged_copy(url, 100, 5000) is None
    assert entry.exists()
    entry.write_bytes(data[:2000] + b"\0" * (len(data) - 2000))  # damaged after byte 2,000
    assert copies_module.damaged_copy(url, 100, 5000) == str(entry)
    assert not entry.exists()
