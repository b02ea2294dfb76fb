"""The node-local shard cache: one download per shard across threads and processes, no
half file in use after a kill, no stale copy after a change, LRU eviction that never
breaks an open reader, a full disk that falls back to the bucket, and a fill file written
in order (its size is how far it is written) and only after the object's check."""

import errno
import logging
import multiprocessing
import os
import shutil
import sys
import threading

import fsspec
import pytest

from tfrecord_torch.errors import RemoteError
from tfrecord_torch.io import atomic, shardcache
from tfrecord_torch.io import files as fs
from tfrecord_torch.io.budget import FillBudget, ReadBudget
from tfrecord_torch.io.shardcache import ShardCache, auto_shard_cache, open_shard, shard_cache_usage


@pytest.fixture
def bucket(monkeypatch):
    """Objects in fsspec's memory file system, each range read counted."""
    memory = fsspec.filesystem("memory")
    reads = []
    real = fs.read_range

    def counted(url, start, end, storage_options=None):
        reads.append((url, start, end))
        return real(url, start, end, storage_options)

    monkeypatch.setattr(fs, "read_range", counted)
    made = []

    def put(name: str, data: bytes) -> str:
        url = f"memory://cachetest/{name}"
        memory.pipe_file(url, data)
        made.append(url)
        return url

    yield put, reads
    for url in made:
        if memory.exists(url):
            memory.rm_file(url)


def _listed(url):
    return fs.size_and_version(url)


def _read(fd: int) -> bytes:
    try:
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)


def test_a_shard_is_copied_once_and_read_locally(bucket, tmp_path):
    put, reads = bucket
    data = os.urandom(100_000)
    url = put("a.tfrecord", data)
    cache = ShardCache(str(tmp_path / "c"))
    size, version = _listed(url)
    assert _read(open_shard(url, cache, size=size, version=version)) == data
    assert _read(open_shard(url, cache, size=size, version=version)) == data
    assert len(reads) == 1  # the second open found the copy
    assert shard_cache_usage(cache) == (1, len(data))
    assert not [n for n in os.listdir(cache.folder) if n.endswith((".partial", ".lock"))]


def test_large_shards_download_in_concurrent_ranges(bucket, tmp_path):
    put, reads = bucket
    budget = ReadBudget(fill=FillBudget(chunk=10_000, longest=10_000))
    data = os.urandom(95_000)
    url = put("big.tfrecord", data)
    size, version = _listed(url)
    assert _read(open_shard(url, ShardCache(str(tmp_path)), size=size, version=version, budget=budget)) == data
    assert sorted(start for _, start, _ in reads) == list(range(0, 95_000, 10_000))


def test_eight_threads_share_one_download(bucket, tmp_path):
    put, reads = bucket
    data = os.urandom(50_000)
    url = put("t.tfrecord", data)
    size, version = _listed(url)
    cache = ShardCache(str(tmp_path))
    got, errors = [], []

    def reader():
        try:
            got.append(_read(open_shard(url, cache, size=size, version=version)))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == [data] * 8
    assert len(reads) == 1


def _fill_in_child(folder, url, size, version, out):
    fd = open_shard(url, ShardCache(folder), size=size, version=version)
    out.put(_read(fd) if fd is not None else None)


def test_forked_readers_share_one_copy(tmp_path):
    # a local file served through file:// stands for the bucket: forked children share no memory
    data = os.urandom(40_000)
    (tmp_path / "src.tfrecord").write_bytes(data)
    url = f"file://{tmp_path / 'src.tfrecord'}"
    size, version = _listed(url)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    children = [ctx.Process(target=_fill_in_child, args=(str(tmp_path / "c"), url, size, version, out))
                for _ in range(4)]
    for c in children:
        c.start()
    results = [out.get(timeout=60) for _ in children]
    for c in children:
        c.join(60)
    assert results == [data] * 4 and all(c.exitcode == 0 for c in children)
    assert shard_cache_usage(ShardCache(str(tmp_path / "c"))) == (1, len(data))


def _killed_mid_copy(folder, entry):
    fd, _ = atomic.create_temp(folder, os.path.basename(entry), lock=True)
    os.write(fd, b"half a shard")
    os._exit(1)  # killed: no cleanup runs


def test_a_filler_killed_mid_download_leaves_no_half_file_in_use(bucket, tmp_path):
    put, _ = bucket
    data = os.urandom(30_000)
    url = put("k.tfrecord", data)
    size, version = _listed(url)
    cache = ShardCache(str(tmp_path))
    entry = shardcache.entry_path(cache, url, size, version)
    child = multiprocessing.get_context("fork").Process(target=_killed_mid_copy, args=(str(tmp_path), entry))
    child.start()
    child.join(30)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".partial")]  # the killed filler's leftover
    assert _read(open_shard(url, cache, size=size, version=version)) == data
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]


def test_least_recently_used_copies_go_and_open_readers_keep_theirs(bucket, tmp_path):
    put, _ = bucket
    cache = ShardCache(str(tmp_path), limit=25_000)
    shards = {name: os.urandom(10_000) for name in ("s0", "s1", "s2")}
    urls = {name: put(name, data) for name, data in shards.items()}
    fds = {}
    for name in ("s0", "s1", "s2"):
        size, version = _listed(urls[name])
        fds[name] = open_shard(urls[name], cache, size=size, version=version)
    assert shard_cache_usage(cache) == (2, 20_000)  # s0, the least recently used, went
    assert [_read(fds[n]) for n in ("s0", "s1", "s2")] == [shards[n] for n in ("s0", "s1", "s2")]


def test_an_object_changed_since_listing_is_never_served(bucket, tmp_path):
    put, _ = bucket
    url = put("c.tfrecord", b"x" * 1000)
    size, version = _listed(url)
    cache = ShardCache(str(tmp_path))
    fsspec.filesystem("memory").pipe_file(url, b"y" * 1200)  # rewritten after the dataset listed it
    with pytest.raises(RemoteError, match="changed before copying it"):
        open_shard(url, cache, size=size, version=version)
    assert shard_cache_usage(cache) == (0, 0)


def test_an_object_changed_during_the_copy_is_discarded(bucket, tmp_path, monkeypatch):
    put, _ = bucket
    url = put("d.tfrecord", b"x" * 1000)
    size, version = _listed(url)
    real = shardcache._download

    def download_then_change(*args):
        real(*args)
        fsspec.filesystem("memory").pipe_file(url, b"z" * 1000 + b"!")

    monkeypatch.setattr(shardcache, "_download", download_then_change)
    with pytest.raises(RemoteError, match="changed while it was being copied"):
        open_shard(url, ShardCache(str(tmp_path)), size=size, version=version)
    assert os.listdir(tmp_path) == []


def test_a_copy_damaged_by_another_process_is_fetched_again(bucket, tmp_path):
    put, reads = bucket
    data = os.urandom(20_000)
    url = put("e.tfrecord", data)
    size, version = _listed(url)
    cache = ShardCache(str(tmp_path))
    os.close(open_shard(url, cache, size=size, version=version))
    entry = shardcache.entry_path(cache, url, size, version)
    with open(entry, "r+b") as f:
        f.truncate(5_000)
    assert _read(open_shard(url, cache, size=size, version=version)) == data
    assert len(reads) == 2


def test_a_full_disk_reads_from_the_bucket_instead(bucket, tmp_path, monkeypatch, caplog):
    put, _ = bucket
    url = put("f.tfrecord", os.urandom(20_000))
    size, version = _listed(url)

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with caplog.at_level(logging.WARNING):
        assert open_shard(url, ShardCache(str(tmp_path)), size=size, version=version) is None
    assert "cannot write (No space left on device)" in caplog.text
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fallocate")
def test_a_fill_reserves_the_disk_for_the_copy_while_its_size_stays_how_far_it_is_written(bucket, tmp_path,
                                                                                          monkeypatch):
    """The copy's blocks are allocated at once (its writes then fill them);
    the fill file's size, which readers following the fill take for how far
    it is written, is 0 before the first byte arrives."""
    put, _ = bucket
    data = os.urandom(300_000)
    url = put("reserved.tfrecord", data)
    size, version = _listed(url)
    cache = ShardCache(str(tmp_path))
    fill = shardcache.fill_path(shardcache.entry_path(cache, url, size, version))
    seen = []
    read_range = fs.read_range

    def looked(*args):
        if not seen:
            st = os.stat(fill)
            seen.append((st.st_size, st.st_blocks * 512))
        return read_range(*args)

    monkeypatch.setattr(fs, "read_range", looked)
    assert _read(open_shard(url, cache, size=size, version=version)) == data
    [(written, allocated)] = seen
    assert written == 0
    assert allocated >= size


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fallocate")
def test_a_disk_without_room_for_the_copy_is_found_before_the_download(bucket, tmp_path, monkeypatch, caplog):
    import ctypes

    put, reads = bucket
    url = put("noroom.tfrecord", os.urandom(5_000))
    size, version = _listed(url)

    def no_room(fd, mode, offset, length):
        ctypes.set_errno(errno.ENOSPC)
        return -1

    monkeypatch.setattr(shardcache, "_fallocate", [no_room], raising=False)
    with caplog.at_level(logging.WARNING):
        assert open_shard(url, ShardCache(str(tmp_path)), size=size, version=version) is None
    assert "cannot write (No space left on device)" in caplog.text
    assert reads == []  # nothing downloaded to be thrown away
    assert os.listdir(tmp_path) == []


def test_a_shard_larger_than_the_limit_is_read_from_the_bucket(bucket, tmp_path):
    put, reads = bucket
    url = put("g.tfrecord", os.urandom(5_000))
    size, version = _listed(url)
    assert open_shard(url, ShardCache(str(tmp_path), limit=4_000), size=size, version=version) is None
    assert reads == []


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="limit"):
        ShardCache(limit=-1)
    with pytest.raises(ValueError, match="ahead"):
        ShardCache(ahead=1.5)


def _disk(monkeypatch, free: int) -> None:
    """Every disk has ``free`` bytes free."""
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=free))


def _shards(size: int, version: str = '"etag"') -> dict:
    """A listing of two remote shards of ``size`` bytes in all."""
    return {"s3://b/x-0": (size // 2, version), "s3://b/x-1": (size - size // 2, version)}


def test_auto_takes_half_the_free_space_up_to_32_gib_and_makes_no_folder(tmp_path, monkeypatch):
    folder = tmp_path / "a" / "b" / "shards"
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(folder))
    _disk(monkeypatch, 10_000)
    assert auto_shard_cache(_shards(5_000)) == ShardCache(str(folder), limit=5_000)
    assert auto_shard_cache(_shards(5_001)) is None
    _disk(monkeypatch, 1 << 40)
    assert auto_shard_cache(_shards(1 << 30)) == ShardCache(str(folder), limit=32 << 30)
    assert auto_shard_cache(_shards((32 << 30) + 1)) is None
    assert not (tmp_path / "a").exists()


def test_auto_does_not_copy_objects_without_a_version(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="tfrecord_torch.io.shardcache"):
        assert auto_shard_cache(_shards(100, version="")) is None
    assert "s3://b/x-0 and 1 more: the server gives no version (ETag)" in caplog.text


def test_auto_counts_the_copies_already_held(tmp_path, monkeypatch):
    """A second run of a job whose copies filled most of the disk still reads them."""
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(tmp_path))
    (tmp_path / f"a.0{shardcache.SUFFIX}").write_bytes(b"x" * 6_000)
    (tmp_path / "other-file").write_bytes(b"x" * 50_000)  # not a copy: not counted
    _disk(monkeypatch, 4_000)
    assert auto_shard_cache(_shards(8_000)) == ShardCache(str(tmp_path), limit=8_000)
    assert auto_shard_cache(_shards(8_001)) is None


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "no", "none"])
def test_the_environment_turns_auto_off_but_not_an_explicit_cache(tmp_path, monkeypatch, caplog, value):
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", value)
    monkeypatch.setattr(shardcache, "_warned", set())  # said once per process: an earlier test may have said it
    with caplog.at_level(logging.INFO, logger="tfrecord_torch.io.shardcache"):
        assert auto_shard_cache(_shards(2)) is None
    assert f"TFRECORD_TORCH_SHARD_CACHE={value}: reading remote shards by range requests" in caplog.text
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ShardCache().folder == str(tmp_path / ".cache" / "tfrecord_torch" / "shards")  # not a folder "off"


def test_auto_gives_up_on_a_folder_under_a_file(tmp_path, monkeypatch, caplog):
    (tmp_path / "file").write_bytes(b"")
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(tmp_path / "file" / "shards"))
    with caplog.at_level(logging.WARNING, logger="tfrecord_torch.io.shardcache"):
        assert auto_shard_cache(_shards(2)) is None
    assert f"the shard cache {tmp_path / 'file' / 'shards'} cannot be written" in caplog.text
    assert "cache=None" in caplog.text


def test_the_first_ranges_are_fetched_while_the_object_is_checked_and_written_after(bucket, tmp_path,
                                                                                   monkeypatch):
    put, reads = bucket
    budget = ReadBudget(fill=FillBudget(chunk=10_000))
    data = os.urandom(50_000)
    url = put("g.tfrecord", data)
    size, version = _listed(url)
    cache = ShardCache(str(tmp_path))
    fill = shardcache.fill_path(shardcache.entry_path(cache, url, size, version))
    fetched = threading.Event()
    read_range, size_and_version = fs.read_range, fs.size_and_version

    def noted(*args):
        got = read_range(*args)
        fetched.set()
        return got

    checks = []

    def held(*args):
        if not checks:  # the check before copying answers once a range has come back
            came = fetched.wait(10)
            checks.append((came, os.path.getsize(fill) if os.path.exists(fill) else None))
        return size_and_version(*args)

    monkeypatch.setattr(fs, "read_range", noted)
    monkeypatch.setattr(fs, "size_and_version", held)
    assert _read(open_shard(url, cache, size=size, version=version, budget=budget)) == data
    assert checks == [(True, 0)]  # a range came back before the check answered, and nothing was written


def test_a_download_asks_for_a_small_first_range_then_larger_ones(bucket, tmp_path):
    put, reads = bucket
    data = os.urandom(30_000)
    url = put("h.tfrecord", data)
    size, version = _listed(url)
    assert _read(open_shard(url, ShardCache(str(tmp_path)), size=size, version=version,
                            budget=ReadBudget(first=1_000, fill=FillBudget(chunk=8_000)))) == data
    # past the ranges below the chunk, the rest in PARALLEL ranges, or fewer of a chunk's bytes at least
    assert sorted((start, end) for _, start, end in reads) == [(0, 1_000), (1_000, 3_000), (3_000, 7_000),
                                                               (7_000, 18_500), (18_500, 30_000)]


@pytest.mark.parametrize("size, count", [(100_000, 2 + 10), (20_000, 2 + 4)])
def test_a_download_past_its_first_ranges_asks_for_few_long_ranges(bucket, tmp_path, monkeypatch, size, count):
    """Each range request costs CPU whatever its length: past the small first
    ranges, a download asks for ranges of the fill budget's ``longest`` bytes,
    or splits a shorter rest into PARALLEL ranges so that as many requests
    stay in flight."""
    put, reads = bucket
    monkeypatch.setattr(shardcache, "PARALLEL", 4)
    data = os.urandom(size)
    url = put("long.tfrecord", data)
    listed, version = _listed(url)
    assert _read(open_shard(url, ShardCache(str(tmp_path)), size=listed, version=version,
                            budget=ReadBudget(first=250, fill=FillBudget(chunk=1_000, longest=10_000)))) == data
    got = sorted((start, end) for _, start, end in reads)
    assert got[:2] == [(0, 250), (250, 750)]  # the small first ranges a reader following the fill starts on
    assert len(got) == count
    assert max(end - start for start, end in got) <= 10_000


def test_a_download_asks_for_no_more_than_ahead_bytes_past_what_it_has_written(bucket, tmp_path, monkeypatch):
    """Ranges that arrive before the one written next are held in memory: a
    download asks for at most the fill budget's ``ahead`` bytes from the
    first range not yet complete."""
    put, _ = bucket
    # no range below the chunk: the first one 1_000 bytes too
    budget = ReadBudget(fill=FillBudget(chunk=1_000, longest=1_000, ahead=3_000))
    data = os.urandom(20_000)
    url = put("ahead.tfrecord", data)
    listed, version = _listed(url)
    first = threading.Event()
    started, ahead = [], []
    read_range = fs.read_range

    def held(url, start, end, storage_options=None):
        started.append(start)
        if start == 0:  # the first range comes last: what is asked meanwhile is held in memory
            first.wait(2)
        elif not first.is_set():
            ahead.append(start)
            if len(ahead) == 2:
                threading.Timer(0.3, first.set).start()  # a look at what else is asked first
        return read_range(url, start, end, storage_options)

    monkeypatch.setattr(fs, "read_range", held)
    assert _read(open_shard(url, ShardCache(str(tmp_path)), size=listed, version=version, budget=budget)) == data
    assert sorted(started) == list(range(0, 20_000, 1_000))
    assert sorted(ahead) == [1_000, 2_000]  # the first range's 1,000 bytes and two more: 3,000 bytes


def test_pieces_that_arrive_out_of_order_are_written_in_order_after_the_check(tmp_path):
    from concurrent.futures import Future

    data = os.urandom(6_000)
    pieces = {at: data[at:at + 1000] for at in range(0, 6_000, 1000)}
    checked: Future = Future()
    fd = os.open(tmp_path / "fill", os.O_RDWR | os.O_CREAT)
    writer = shardcache._InOrder(fd, checked)
    for at in (2000, 0, 1000):
        writer.put(at, pieces[at])
    assert os.fstat(fd).st_size == 0  # kept, not written: the writing is the download thread's
    checked.set_result(None)
    sizes = []
    for at in (4000, 3000, 5000):
        writer.write(None)
        sizes.append(os.fstat(fd).st_size)
        writer.put(at, pieces[at])
    writer.write(None)
    sizes.append(os.fstat(fd).st_size)
    assert sizes == [3000, 3000, 5000, 6000]  # the size is how far the bytes are all written
    assert os.pread(fd, 10_000, 0) == data
    os.close(fd)


def test_the_download_thread_writes_pieces_as_another_thread_brings_them(tmp_path):
    from concurrent.futures import Future

    data = os.urandom(50_000)
    fd = os.open(tmp_path / "fill", os.O_RDWR | os.O_CREAT)
    writer = shardcache._InOrder(fd, None)
    fetching: Future = Future()
    seen = []

    def bring():
        for at in range(0, 50_000, 1000):
            writer.put(at, data[at:at + 1000])
            seen.append(os.fstat(fd).st_size)
        fetching.set_result(None)

    thread = threading.Thread(target=bring)
    thread.start()
    writer.write(writer.watch(fetching))
    thread.join()
    assert os.pread(fd, 60_000, 0) == data
    assert seen == sorted(seen)  # only ever grows: written in order
    os.close(fd)


def test_a_changed_object_writes_none_of_its_pieces(tmp_path):
    from concurrent.futures import Future

    checked: Future = Future()
    checked.set_exception(RemoteError("memory://x", "changed"))
    fd = os.open(tmp_path / "fill", os.O_RDWR | os.O_CREAT)
    writer = shardcache._InOrder(fd, checked)
    writer.put(0, b"abc")
    with pytest.raises(RemoteError):
        writer.write(None)
    assert os.fstat(fd).st_size == 0
    os.close(fd)
