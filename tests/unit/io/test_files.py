"""files.filesystem: one filesystem object per protocol and options in a process, also
when the options ask fsspec for a new object on every call (``skip_instance_cache``),
never the caller's own object, and never one a forked child inherited. files.stream_range:
the bytes in order, whole where the file system does not stream, a dropped stream
resumed where it stood, and the sink's own error raised unretried."""

import errno
import multiprocessing
import os

import fsspec
import pytest

from tfrecord_torch.io import files

SKIP = {"skip_instance_cache": True}


def test_options_that_skip_fsspecs_instance_cache_build_one_object_per_process():
    first, path = files.filesystem("memory://a/b.tfrecord", SKIP)
    again, other = files.filesystem("memory://c.tfrecord", dict(SKIP))
    assert again is first and (path, other) == ("/a/b.tfrecord", "/c.tfrecord")
    assert fsspec.filesystem("memory", **SKIP) is not first  # the caller's objects stay the caller's
    assert files.filesystem("memory://a", {**SKIP, "extra": 1})[0] is not first  # other options, other object


def test_fsspecs_own_cache_is_left_to_it():
    assert files.filesystem("memory://a", None)[0] is fsspec.filesystem("memory")


def _same_in_child(parent, queue) -> None:
    queue.put(files.filesystem("memory://a", SKIP)[0] is parent)


@pytest.mark.parametrize("paths", [("memory://x.tfrecord", "/x.tfrecord"), ("s3://bucket/k/x.tfrecord", "bucket/k/x.tfrecord")])
def test_the_path_is_fsspecs_whether_the_object_is_new_or_kept(paths):
    pytest.importorskip("s3fs")
    url, path = paths
    options = {**SKIP, "anon": True} if url.startswith("s3://") else SKIP
    assert files.filesystem(url, options)[1] == path == files.filesystem(url, options)[1]


def test_a_forked_child_builds_its_own():
    parent = files.filesystem("memory://a", SKIP)[0]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_same_in_child, args=(parent, queue))
    child.start()
    same = queue.get(timeout=60)
    child.join(60)
    assert same is False and files.filesystem("memory://a", SKIP)[0] is parent


def _put(name: str, data: bytes) -> str:
    url = f"memory://streamed/{name}"
    fsspec.filesystem("memory").pipe(url, data)
    return url


def test_a_range_of_a_file_system_that_does_not_stream_comes_whole():
    data = bytes(range(256)) * 40
    url = _put("whole.bin", data)
    got = []
    assert files.stream_range(url, 100, 9_000, lambda at, piece: got.append((at, piece))) == 9_000
    assert got == [(100, data[100:9_000])]
    got.clear()
    assert files.stream_range(url, 10_000, 20_000, lambda at, piece: got.append((at, piece))) == 10_240
    assert got == [(10_000, data[10_000:])]  # fewer at the end


def _streaming(monkeypatch, data: bytes, fail_after: list[int]) -> list:
    """A file system whose ranges stream in 1,000-byte pieces; each call
    drops its connection after the number of pieces listed (one entry a call)."""
    from tfrecord_torch.io import retry, streamed

    calls = []

    def pieces(fs, path, start, end, sink, cancel, check=None):
        calls.append((start, end))
        limit = fail_after.pop(0) if fail_after else None
        at = start
        while at < min(end, len(data)):
            if limit == 0:
                raise ConnectionResetError("dropped mid-body")
            piece = data[at:min(at + 1000, end)]
            sink(at, piece)
            at += len(piece)
            limit = None if limit is None else limit - 1
        return at

    monkeypatch.setattr(streamed, "streams", lambda fs: True)
    monkeypatch.setattr(streamed, "s3_pieces", pieces)
    monkeypatch.setattr(retry, "BACKOFF", 0.001)
    return calls


def test_a_streamed_range_comes_in_order_and_resumes_where_it_dropped(monkeypatch):
    data = os.urandom(10_000)
    url = _put("dropped.bin", data)
    calls = _streaming(monkeypatch, data, fail_after=[3, 2])
    got = []
    assert files.stream_range(url, 500, 9_500, lambda at, piece: got.append((at, piece))) == 9_500
    assert calls == [(500, 9_500), (3_500, 9_500), (5_500, 9_500)]  # each retry from the byte it stood at
    assert [at for at, _ in got] == list(range(500, 9_500, 1000))
    assert b"".join(piece for _, piece in got) == data[500:9_500]


def test_a_sinks_error_is_raised_as_it_is_and_not_retried(monkeypatch):
    data = os.urandom(5_000)
    url = _put("full.bin", data)
    calls = _streaming(monkeypatch, data, fail_after=[])

    def full(at, piece):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as e:
        files.stream_range(url, 0, 5_000, full)
    assert e.value.errno == errno.ENOSPC and len(calls) == 1
