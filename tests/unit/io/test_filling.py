"""Reading a shard's copy while the shard cache fills it: a reader in another
process reads the part written (and nothing from the bucket), a killed
filler's file is never read, and a fill given up is cut before it is let go,
so no byte of it is read after."""

import contextlib
import multiprocessing
import os
import threading
import time

import pytest

from tfrecord_torch.errors import RemoteError
from tfrecord_torch.io import files as fs
from tfrecord_torch.io import shardcache
from tfrecord_torch.io.budget import FillBudget, ReadBudget
from tfrecord_torch.io.filling import FillView
from tfrecord_torch.io.shardcache import ShardCache, fill_path, open_shard

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="flock and fork")


def _source(tmp_path, data: bytes) -> tuple[str, int, str]:
    # a local file through file:// stands for the bucket: forked children share no memory
    (tmp_path / "src.tfrecord").write_bytes(data)
    url = f"file://{tmp_path / 'src.tfrecord'}"
    size, version = fs.size_and_version(url)
    return url, size, version


def _slow_fill(folder, url, size, version) -> None:
    budget = ReadBudget(fill=FillBudget(chunk=10_000, longest=10_000))  # several ranges, written one after another
    real = fs.read_range

    def slow(*args):
        time.sleep(0.05)
        return real(*args)

    fs.read_range = slow
    fd = open_shard(url, ShardCache(folder), size=size, version=version, budget=budget)
    os._exit(0 if fd is not None else 1)


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.001)


def test_a_reader_reads_the_part_another_process_has_filled(tmp_path, monkeypatch):
    data = os.urandom(95_000)
    url, size, version = _source(tmp_path, data)
    folder = str(tmp_path / "cache")
    entry = shardcache.entry_path(ShardCache(folder), url, size, version)
    child = multiprocessing.get_context("fork").Process(target=_slow_fill, args=(folder, url, size, version))
    child.start()
    asked = []
    monkeypatch.setattr(fs, "read_range", lambda *args: asked.append(args))  # this process never fetches
    _wait_for(fill_path(entry))
    view = FillView(entry, size, pending=lambda: False)
    got = [view.read(offset, 7_000) for offset in range(0, size, 7_000)]
    view.close()
    child.join(60)
    assert child.exitcode == 0
    assert b"".join(got) == data and not asked
    assert view.read(90_000, 10_000) == data[90_000:]  # the copy, complete
    view.close()


def _killed_mid_fill(entry: str, data: bytes) -> None:
    fd = shardcache._create_fill(fill_path(entry))
    os.write(fd, data[:len(data) // 2])
    os._exit(1)  # killed: no cleanup runs


def test_a_killed_fillers_bytes_are_never_read(tmp_path):
    data = os.urandom(30_000)
    url, size, version = _source(tmp_path, data)
    cache = ShardCache(str(tmp_path / "cache"))
    os.makedirs(cache.folder)
    entry = shardcache.entry_path(cache, url, size, version)
    child = multiprocessing.get_context("fork").Process(target=_killed_mid_fill, args=(entry, data))
    child.start()
    child.join(30)
    assert os.path.getsize(fill_path(entry)) == 15_000  # its half copy, no longer held
    view = FillView(entry, size, pending=lambda: False)
    assert view.read(0, 1_000) is None  # read the bucket: no fill will come
    os.close(open_shard(url, cache, size=size, version=version))  # the next fill replaces it
    assert view.read(0, size) == data
    view.close()
    assert not os.path.exists(fill_path(entry))


def test_a_fill_given_up_is_cut_before_it_is_let_go(tmp_path, monkeypatch):
    data = os.urandom(40_000)
    url, size, version = _source(tmp_path, data)
    cache = ShardCache(str(tmp_path / "cache"))
    entry = shardcache.entry_path(cache, url, size, version)
    go = threading.Event()

    def half_then_changed(url, fd, size, storage_options, cancel=None, checked=None, check=None, budget=None):
        os.pwrite(fd, data[:20_000], 0)
        assert go.wait(30)
        raise RemoteError(url, "the object changed while it was being copied (injected)")

    monkeypatch.setattr(shardcache, "_download", half_then_changed)
    errors = []

    def fill():
        try:
            open_shard(url, cache, size=size, version=version)
        except RemoteError as e:
            errors.append(e)

    filler = threading.Thread(target=fill)
    filler.start()
    _wait_for(fill_path(entry))
    view = FillView(entry, size, pending=filler.is_alive)
    assert view.read(0, 10_000) == data[:10_000]  # written by a live fill: as a range request would give
    waiting = []
    reader = threading.Thread(target=lambda: waiting.append(view.read(30_000, 10_000)))
    reader.start()  # waits for bytes the fill will not write
    go.set()
    filler.join(30)
    reader.join(30)
    assert errors and waiting == [None]  # the bucket, not a byte of the given-up copy
    assert view.read(0, 10_000) is None
    view.close()
    assert os.listdir(cache.folder) == []


@contextlib.contextmanager
def _live_fill(tmp_path, name: str, data: bytes, written: bytes, budget: ReadBudget):
    """A shard in a memory bucket, a fill of ours of it that holds its lock
    and has written ``written`` (bytes the bucket need not hold: where a read
    came from shows) and writes no more, and a reader of the shard; yields
    (reader, give_up): ``give_up()`` cuts the fill and lets it go."""
    import fsspec

    from tfrecord_torch.io import atomic, pool
    from tfrecord_torch.io.copies import ShardCopies

    url = f"memory://filltest/{name}.tfrecord"
    fsspec.filesystem("memory").pipe_file(url, data)
    size, version = fs.size_and_version(url)
    cache = ShardCache(str(tmp_path / "cache"))
    os.makedirs(cache.folder)
    entry = shardcache.entry_path(cache, url, size, version)
    lock = atomic.lock_file(entry + ".lock", wait=True)  # a fill of ours: the reader's own fill waits for it
    fill = shardcache._create_fill(fill_path(entry))
    os.write(fill, written)
    copies = ShardCopies(cache, {url: (size, version)})
    reader = pool.Reader(url, copies=copies, budget=budget)
    given_up: list = []

    def give_up():
        if not given_up:
            given_up.append(True)
            shardcache._give_up(fill, fill_path(entry))
            atomic.unlock(entry + ".lock", lock)

    try:
        yield reader, give_up
    finally:
        give_up()
        reader.close()
        copies.close(finish=True)
        fsspec.filesystem("memory").rm_file(url)


def test_a_random_read_far_past_the_fill_goes_to_the_bucket(tmp_path):
    data = os.urandom(50_000)
    with _live_fill(tmp_path, "far", data, b"F" * 10_000, ReadBudget(far=1_000)) as (reader, give_up):
        assert reader.read(0, 5_000) == b"F" * 5_000  # the fill's
        assert reader.read(30_000, 1_000, wait=False) == data[30_000:31_000]  # far past it: the bucket's
        assert reader.read(9_500, 400, wait=False) == b"F" * 400  # the fill is still read
        give_up()
        assert reader.read(0, 5_000) == data[:5_000]  # the reader's own fill, or the bucket: never the given-up bytes


def test_a_read_that_need_not_wait_does_not_wait_for_a_fill_queued_behind_others(tmp_path):
    """A global shuffle's first group touches every shard, and fills run a few
    at a time: a shuffled read of a shard whose fill is still queued is read
    from the bucket at once (before, it waited for that fill to begin)."""
    import fsspec

    from tfrecord_torch.io import pool
    from tfrecord_torch.io.copies import ShardCopies

    data = os.urandom(50_000)
    url = "memory://filltest/queued.tfrecord"
    fsspec.filesystem("memory").pipe_file(url, data)
    size, version = fs.size_and_version(url)
    copies = ShardCopies(ShardCache(str(tmp_path / "cache")), {url: (size, version)})
    copies.fill_later = lambda url: None  # the fill asked for stays in the queue: the filler's threads are busy
    copies._fill_pending = copies._fill_queued = lambda url: True
    reader = pool.Reader(url, copies=copies)
    got = []
    reading = threading.Thread(target=lambda: got.append(reader.read(100, 1_000, wait=False)), daemon=True)
    reading.start()
    reading.join(20)
    assert got == [data[100:1_100]]  # the bucket's, without waiting
    copies._fill_pending = copies._fill_queued = lambda url: False
    reading.join(20)
    reader.close()
    copies.close(finish=True)
    fsspec.filesystem("memory").rm_file(url)


def test_a_first_read_waits_for_the_fills_first_range_and_no_later_one(tmp_path):
    """A first read (``far`` given: the budget's ``first``) takes the bytes
    the fill has written and goes to the bucket for any past the fill's first
    range, however near what the fill has written: it never waits for a later
    range. Before, with the first range written, a record within ``far``
    bytes past it waited for the second range (a test under load timed out
    on it)."""
    data = os.urandom(5_000)
    got: list = []
    with _live_fill(tmp_path, "first", data, b"F" * 380, ReadBudget(first=300, far=16_000)) as (reader, give_up):
        # the fill's first range (300 bytes, up to a record's end) is written, and no more
        past = threading.Thread(target=lambda: got.append(reader.read(380, 76, wait=False, far=300)))
        try:
            assert reader.read(0, 380, wait=False, far=300) == b"F" * 380  # written: the fill's
            past.start()
            past.join(5)
            assert not past.is_alive()  # it did not wait for the fill's next range
            assert got == [data[380:456]]  # past the first range: the bucket's
        finally:
            give_up()
            if past.ident:  # started: it ends once the fill is given up
                past.join(30)


def test_a_read_of_a_fill_that_comes_back_short_is_read_on(tmp_path, monkeypatch):
    """A positioned read of the fill file may return fewer bytes than asked (FUSE,
    NFS): the view reads on and returns the bytes written, where it used to ask
    for the same bytes again and again for ever."""
    data = os.urandom(30_000)
    url, size, version = _source(tmp_path, data)
    cache = ShardCache(str(tmp_path / "cache"))
    os.makedirs(cache.folder)
    entry = shardcache.entry_path(cache, url, size, version)
    fd = shardcache._create_fill(fill_path(entry))  # a live fill of this process, flocked
    try:
        os.write(fd, data[:20_000])
        real, calls = os.pread, []

        def short(f, n, at):  # 1,000 bytes a call, and not without end
            calls.append(n)
            if len(calls) > 100:
                raise AssertionError("the same bytes read again and again")
            return real(f, min(n, 1_000), at)

        monkeypatch.setattr(os, "pread", short)
        view = FillView(entry, size, pending=lambda: True)
        try:
            assert view.read(5_000, 10_000) == data[5_000:15_000]
        finally:
            view.close()
    finally:
        os.close(fd)
