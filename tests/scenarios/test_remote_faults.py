"""Remote faults: which answers are final and which are retried,
empty objects, and servers that ignore Range (S3 through moto, HTTP through
a local server)."""

import http.server
import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from helpers import ids_of

from tfrecord_torch import (
    ReadBudget,
    RecordWriter,
    ShardCache,
    Source,
    TFRecordDataset,
    make_example,
    read_records,
)
from tfrecord_torch.errors import RemoteError
from tfrecord_torch.io.budget import FillBudget
from tfrecord_torch.io.shardcache import shard_cache_usage
from tfrecord_torch.records.writer import frame

from .test_remote import S3, with_bucket

ROOT = Path(__file__).resolve().parents[2]


class FaultyS3(S3):
    """The moto server, plus answers with any status for matching requests."""

    def __init__(self) -> None:
        super().__init__()
        self.status: tuple[str, bytes] | None = None
        self.status_count = 0
        self.status_methods = ("GET", "HEAD")

    def handle(self, environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        if self.status and self.status_count and method in self.status_methods and self.fault_path in path:
            self.status_count -= 1
            self.requests.append((method, path, environ.get("HTTP_RANGE")))
            start_response(self.status[0], [("Content-Type", "application/xml")])
            return [b"" if method == "HEAD" else self.status[1]]
        return super().handle(environ, start_response)


@pytest.fixture(scope="module")
def s3():
    yield from with_bucket(FaultyS3())


@pytest.fixture
def opts(s3, monkeypatch, tmp_path):
    """Only this package retries (s3fs and botocore give up at once), quickly."""
    import s3fs

    from tfrecord_torch.io import retry

    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    monkeypatch.setattr(retry, "BACKOFF", 0.01)
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    s3.status, s3.status_count, s3.fault_path = None, 0, ""
    return {**s3.options, "config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}}}


def retries_logged(caplog) -> int:
    return sum(1 for r in caplog.records if r.name == "tfrecord_torch.io.retry" and "retrying" in r.getMessage())


def put(s3, key, records):
    with RecordWriter(f"s3://bucket/{key}", storage_options=s3.options) as w:
        for r in records:
            w.write(r)


def test_an_empty_object_is_a_shard_of_no_records(s3, opts, caplog):
    put(s3, "empty/a-0.tfrecord", [make_example({"id": i}) for i in range(3)])
    s3.fs().pipe_file("bucket/empty/a-1.tfrecord", b"")
    for index in (None, False):
        ds = TFRecordDataset("s3://bucket/empty/a-*.tfrecord", storage_options=opts,
                             source=Source(index=index))
        assert sorted(ids_of(ds)) == [0, 1, 2]
    assert list(read_records("s3://bucket/empty/a-1.tfrecord", storage_options=opts)) == []
    from tfrecord_torch.records.compression import compression_of

    assert compression_of("s3://bucket/empty/a-1.tfrecord", "auto", opts) is None
    assert retries_logged(caplog) == 0


@pytest.mark.parametrize("url, kind", [
    ("s3://bucket/missing/x.tfrecord", FileNotFoundError),
    ("s3://no-such-bucket/x.tfrecord", FileNotFoundError),
])
def test_missing_key_or_bucket_is_final_and_named(s3, opts, caplog, url, kind):
    key = url.split("://", 1)[1]
    for call in (lambda: list(read_records(url, storage_options=opts)),
                 lambda: TFRecordDataset(url, storage_options=opts)):
        s3.requests.clear()
        with pytest.raises(kind) as info:
            call()
        assert url in str(info.value)
        asked = [r for r in s3.requests if key.split("/", 1)[0] in r[1]]
        assert len(asked) <= 4, asked  # a stat or two, not rounds of retries
    assert retries_logged(caplog) == 0


@pytest.mark.parametrize("status", ["403 Forbidden", "400 Bad Request", "416 Requested Range Not Satisfiable"])
def test_4xx_answers_are_final(s3, opts, caplog, status):
    put(s3, "f4/a.tfrecord", [b"x"] * 5)
    url = "s3://bucket/f4/a.tfrecord"
    code = status.split()[0]
    s3.status = (status, f"<Error><Code>{'AccessDenied' if code == '403' else 'Bad'}</Code>"
                         f"<Message>injected {code}</Message></Error>".encode())
    s3.status_count, s3.fault_path = 1000, "f4/a.tfrecord"
    with pytest.raises((RemoteError, OSError)) as info:
        list(read_records(url, storage_options=opts))
    assert 1000 - s3.status_count <= 2  # answered once (a stat and a read at most), never retried
    assert url in str(info.value)
    if code == "403":
        assert isinstance(info.value, RemoteError) and "denied" in str(info.value).lower()
    assert retries_logged(caplog) == 0


@pytest.mark.parametrize("status", ["503 Slow Down", "500 Internal Server Error"])
def test_5xx_and_throttling_are_retried_everywhere(s3, opts, caplog, status):
    put(s3, "f5/a.tfrecord", [make_example({"id": i}) for i in range(4)])
    s3.status = (status, b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>")
    s3.status_count, s3.fault_path = 2, "f5/a.tfrecord"  # the stat and the read both meet one
    ds = TFRecordDataset("s3://bucket/f5/a.tfrecord", storage_options=opts, source=Source(index=False))
    assert ids_of(ds) == [0, 1, 2, 3]
    assert s3.status_count == 0 and retries_logged(caplog) >= 1


# --- HTTP -------------------------------------------------------------------------


class Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``files`` (path -> bytes, or a callable giving (size, chunks)); ``ranges``
    False ignores Range; ``fail`` maps a path to a list of statuses to answer first."""

    files: dict = {}
    ranges = True
    fail: dict = {}
    log: list = []

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        self.log.append((self.command, self.path, self.headers.get("Range")))
        pending = self.fail.get(self.path)
        if pending:
            self.send_error(pending.pop(0))
            return
        item = self.files.get(self.path)
        if item is None:
            self.send_error(404)
            return
        size, chunks = item() if callable(item) else (len(item), lambda: [item])
        status, first, last = 200, 0, size - 1
        asked = self.headers.get("Range")
        if asked and self.ranges and size:
            a, b = asked.split("=", 1)[1].split("-")
            first, last = int(a), min(int(b) if b else size - 1, size - 1)
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("Accept-Ranges", "bytes" if self.ranges else "none")
        if status == 206:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        if not body:
            return
        pos = 0
        try:
            for chunk in chunks():
                lo, hi = max(first - pos, 0), min(last + 1 - pos, len(chunk))
                if lo < hi:
                    self.wfile.write(chunk[lo:hi])
                pos += len(chunk)
                if pos > last:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def web(tmp_path, monkeypatch):
    from tfrecord_torch.io import retry

    monkeypatch.setattr(retry, "BACKOFF", 0.01)
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    Handler.files, Handler.ranges, Handler.fail, Handler.log = {}, True, {}, []


def shard_bytes(n, size=8):
    return b"".join(frame(make_example({"id": i, "pad": b"p" * size})) for i in range(n))


def test_http_503_in_existence_checks_is_retried(web, caplog):
    Handler.files["/d/a.tfrecord"] = shard_bytes(5)
    Handler.fail["/d/a.tfrecord"] = [503, 503]
    ds = TFRecordDataset(f"{web}/d/a.tfrecord", source=Source(index=False))
    assert ids_of(ds) == list(range(5))
    assert retries_logged(caplog) >= 1


def test_http_404_is_final_and_named(web, caplog):
    url = f"{web}/d/none.tfrecord"
    with pytest.raises(FileNotFoundError, match="none.tfrecord"):
        TFRecordDataset(url)
    assert len(Handler.log) <= 2 and retries_logged(caplog) == 0


def test_http_without_ranges_needs_an_index_says_so_before_downloading(web):
    data = shard_bytes(2000, 500)
    Handler.files["/d/a.tfrecord"] = data
    Handler.ranges = False
    url = f"{web}/d/a.tfrecord"
    with pytest.raises(RemoteError, match="range"):
        TFRecordDataset(url)  # an index would be needed: refused before any record
    assert ids_of(TFRecordDataset(url, source=Source(index=False))) == list(range(2000))
    assert sum(1 for r in read_records(url)) == 2000


def test_the_default_cache_does_not_copy_objects_without_a_version(web, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(tmp_path / "shards"))
    Handler.files["/d/e.tfrecord"] = shard_bytes(50)  # served with no ETag
    with caplog.at_level(logging.WARNING, logger="tfrecord_torch.io.shardcache"):
        ds = TFRecordDataset(f"{web}/d/e.tfrecord", source=Source(index=False))
    assert ids_of(ds) == list(range(50))
    assert f"{web}/d/e.tfrecord: the server gives no version (ETag) of the object" in caplog.text
    assert not (tmp_path / "shards").exists()


def test_http_without_ranges_is_copied_to_the_shard_cache_by_one_streamed_get(web, tmp_path):
    budget = ReadBudget(fill=FillBudget(chunk=1000))  # many range requests a shard, on a server that honoured them
    data = shard_bytes(300, 100)
    Handler.files["/d/c.tfrecord"] = data
    Handler.ranges = False
    url = f"{web}/d/c.tfrecord"
    # this server sends no ETag, so the default ("auto") would not copy: the cache is asked for
    ds = TFRecordDataset(url, source=Source(index=False, cache=ShardCache(str(tmp_path / "shards")), read_budget=budget))
    Handler.log.clear()
    assert ids_of(ds) == list(range(300))
    streams = [r for r in Handler.log if r[0] == "GET" and r[2] is None]
    # copied by one streamed GET (after its first ranges came back whole), read as the copy is written
    assert len(streams) == 1, Handler.log
    assert shard_cache_usage(ShardCache(str(tmp_path / "shards"))) == (1, len(data))
    Handler.log.clear()
    assert ids_of(ds) == list(range(300))
    assert [r for r in Handler.log if r[0] == "GET"] == []  # the next epoch reads the copy


@pytest.mark.slow  # 300 MB through loopback twice: about 10 s here
def test_http_without_ranges_streams_a_large_object_in_bounded_memory(web):
    # ~300 MB of records generated as they are sent: the server holds none of it.
    record = frame(make_example({"id": 1, "pad": b"z" * 10_000}))
    count = 30_000
    block = record * 100

    def generated():
        return len(record) * count, lambda: (block for _ in range(count // 100))

    Handler.files["/big.tfrecord"] = generated
    Handler.ranges = False
    script = textwrap.dedent(f"""
        from tfrecord_torch import read_records
        def peak():  # VmHWM: ru_maxrss would carry the parent's peak over exec
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) // 1024
        n = sum(1 for _ in read_records("{web}/big.tfrecord"))
        first = peak()
        import torch
        from tfrecord_torch import Source, TFRecordDataset
        base = peak()
        m = sum(1 for _ in TFRecordDataset("{web}/big.tfrecord", source=Source(index=False, cache=None)))
        print(n, m, first, base, peak())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    n, m, first, base, peak = (int(v) for v in out.stdout.split())
    assert n == m == count, out.stderr
    assert first < 150  # MB, reading a 300 MB object: nothing but the read-ahead is held
    assert peak - base < 150, out.stderr  # the dataset, over torch's own import


# A reader closed on fsspec's event-loop thread, as the garbage collector may do
# when it finds an unfinished iterator in a reference cycle (a failed step's
# traceback) while that thread allocates. Run in a child: on failure the loop
# thread is stuck for good.
_CLOSED_ON_THE_LOOP = r'''
import http.server, os, sys, threading, time
import fsspec.asyn
from tfrecord_torch import RecordWriter, Source, TFRecordDataset, make_example

path = sys.argv[1]
with RecordWriter(path) as w:
    for i in range(20000):
        w.write(make_example({"id": i, "pad": b"x" * 2000}))
data = open(path, "rb").read()
slow = threading.Event()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_HEAD(self): self._send(False)
    def do_GET(self): self._send(True)
    def _send(self, body):
        start, end = 0, len(data)
        if self.headers.get("Range"):
            a, b = self.headers["Range"].split("=")[1].split("-")
            start, end = int(a), (int(b) + 1 if b else len(data))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(end - start))
        self.send_header("ETag", '"v1"')
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        for at in range(start, end, 65536) if body else ():
            if slow.is_set():
                time.sleep(0.05)
            try:
                self.wfile.write(data[at:min(at + 65536, end)])
            except OSError:
                return
    def log_message(self, *args): pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
ds = TFRecordDataset(f"http://127.0.0.1:{server.server_port}/a.tfrecord", source=Source(index=False, cache=None))
it = iter(ds)
first = next(it)
slow.set()  # the read-ahead thread now waits on the event loop for its next bytes
time.sleep(0.3)
closed = threading.Event()
def close_here():
    it.close()
    closed.set()
fsspec.asyn.get_loop().call_soon_threadsafe(close_here)
print(int(first["id"][0]), "closed" if closed.wait(20) else "hung", flush=True)
os._exit(0)
'''


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_a_reader_closed_on_the_event_loop_thread_does_not_wait_for_it(tmp_path):
    out = subprocess.run([sys.executable, "-c", _CLOSED_ON_THE_LOOP, str(tmp_path / "a.tfrecord")],
                         capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["0", "closed"], out.stderr[-3000:]  # "hung": the close waited on the loop
