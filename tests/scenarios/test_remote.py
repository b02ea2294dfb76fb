"""Remote shards through fsspec, against a real S3 endpoint on 127.0.0.1
(moto's server) that logs every request and can inject faults."""

import http.server
import json
import os
import threading
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
import torchvision
from helpers import ids_of, listing, write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import (
    Execution,
    IndexedReader,
    IndexedTFRecordDataset,
    Int64,
    ReadBudget,
    RecordWriter,
    ShardedWriter,
    ShardLayout,
    Source,
    TFRecordDataset,
    build_index,
    load_index,
    make_example,
    read_records,
    tfds_dataset,
    write_dataset,
    write_order,
)
from tfrecord_torch.data.shards import expand_paths
from tfrecord_torch.errors import RemoteError
from tfrecord_torch.records.index import writer_index_path


class S3:
    """A moto S3 server on 127.0.0.1 with a request log and fault switches."""

    def __init__(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        self.app = DomainDispatcherApplication(create_backend_app)
        self.requests: list[tuple[str, str, str | None]] = []
        self.fail_500 = 0  # answer this many matching GETs with 500
        self.drop = 0  # cut this many matching GET bodies short
        self.fault_path = ""
        self.server = make_server("127.0.0.1", 0, self.handle, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.options = {"key": "test", "secret": "test",
                        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{self.server.port}",
                                          "region_name": "us-east-1"}}

    def handle(self, environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        self.requests.append((method, path, environ.get("HTTP_RANGE")))
        faulty = method == "GET" and self.fault_path and self.fault_path in path
        if faulty and self.fail_500:
            self.fail_500 -= 1
            start_response("500 Internal Server Error", [("Content-Type", "application/xml")])
            return [b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"]
        if faulty and self.drop:
            self.drop -= 1
            body = b"".join(self.app(environ, start_response))
            return _cut(body)
        return self.app(environ, start_response)

    def fs(self):
        import s3fs

        return s3fs.S3FileSystem(**self.options)

    def close(self) -> None:
        self.server.shutdown()


class Overlap:
    """Holds the answer to the first request ``held`` picks until one
    ``awaited`` picks comes in (at most ``timeout`` s): :attr:`overlapped`
    says whether it came while the first was unanswered (a serial client
    sends it only after the first answer). Each pick gets ``(method, path,
    query)``, the query parsed."""

    def __init__(self, s3, monkeypatch, held, awaited, timeout: float = 5.0) -> None:  # noqa: F811
        self.came = threading.Event()
        self.overlapped: bool | None = None
        self._lock = threading.Lock()
        app = s3.app

        def wrapped(environ, start_response):
            request = (environ["REQUEST_METHOD"], environ["PATH_INFO"],
                       urllib.parse.parse_qs(environ.get("QUERY_STRING", "")))
            with self._lock:
                hold = self.overlapped is None and held(*request)
                if hold:
                    self.overlapped = False
                elif awaited(*request):
                    self.came.set()
            if hold:
                self.overlapped = self.came.wait(timeout)
            return app(environ, start_response)

        monkeypatch.setattr(s3, "app", wrapped)


def is_listing(method, path, query) -> bool:
    return method == "GET" and path.strip("/") == "bucket" and "prefix" in query


def _cut(body):
    yield body[: len(body) // 2]
    raise ConnectionResetError("injected: connection dropped mid-body")


def with_bucket(server):
    """``server`` with an empty bucket named "bucket", closed when the caller's fixture ends."""
    import urllib.request

    endpoint = server.options["client_kwargs"]["endpoint_url"]
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bucket", method="PUT")).read()
    yield server
    server.close()


@pytest.fixture(scope="module")
def s3():
    yield from with_bucket(S3())


@pytest.fixture
def only_our_retries(s3, monkeypatch):
    """Storage options under which s3fs and botocore give up at once, so only
    this package's retries can recover from a fault."""
    import s3fs

    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    return {**s3.options, "config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}}}


def retried(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tfrecord_torch.io.retry" and "retrying" in r.getMessage()]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def write_remote_shards(s3, prefix, counts):
    next_id = 0
    with ShardedWriter(f"s3://bucket/{prefix}", name="data", max_records=max(counts),
                       storage_options=s3.options) as w:
        for n in counts:
            for _ in range(n):
                w.write(make_example({"id": next_id, "x": np.full(8, next_id, np.float32)}))
                next_id += 1
    return w.paths


def test_sharded_writer_uploads_complete_objects_with_indexes(s3):
    paths = write_remote_shards(s3, "w1", [10, 10, 5])
    fs = s3.fs()
    names = sorted(os.path.basename(p) for p in fs.ls("bucket/w1"))
    assert names == [f"data-train.tfrecord-0000{i}-of-00003" for i in range(3)] + ["index"]
    assert sorted(os.path.basename(p) for p in fs.ls("bucket/w1/index")) == \
        [f"data-train.tfrecord-0000{i}-of-00003.index" for i in range(3)]
    assert paths[0] == "s3://bucket/w1/data-train.tfrecord-00000-of-00003"
    assert load_index(writer_index_path(paths[2]), storage_options=s3.options).shape == (5, 2)
    assert len(list(read_records(paths[0], storage_options=s3.options))) == 10


def test_record_writer_object_appears_only_when_closed(s3):
    url = "s3://bucket/single/a.tfrecord"
    w = RecordWriter(url, storage_options=s3.options)
    w.write(b"abc")
    assert not s3.fs().exists("bucket/single/a.tfrecord")
    w.close()
    assert list(read_records(url, storage_options=s3.options)) == [b"abc"]
    with pytest.raises(RuntimeError):
        with RecordWriter("s3://bucket/single/b.tfrecord", storage_options=s3.options) as w:
            w.write(b"x")
            raise RuntimeError("interrupted")
    assert not s3.fs().exists("bucket/single/b.tfrecord")


def test_glob_and_stream_with_two_workers_exactly_once(s3, cache):
    write_remote_shards(s3, "w2", [7, 7, 7, 3])
    pattern = "s3://bucket/w2/data-train.tfrecord-*"
    assert len(expand_paths(pattern, s3.options)) == 4  # index objects are skipped
    assert len(expand_paths("s3://bucket/w2", s3.options)) == 4  # a prefix works like a folder
    ds = TFRecordDataset(pattern, storage_options=s3.options, shuffle=True)
    assert len(ds) == 24
    got = ids_of(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(got) == list(range(24))
    # Streamed without indexes (read-ahead, shards dealt whole to the workers).
    s3.requests.clear()
    streamed = TFRecordDataset(pattern, storage_options=s3.options, source=Source(index=False, cache=None))
    assert sorted(ids_of(DataLoader(streamed, batch_size=None, num_workers=2))) == list(range(24))
    gets = [r for r in s3.requests if r[0] == "GET" and "/w2/data-train.tfrecord-" in r[1]
            and not r[1].endswith(".index")]
    assert len(gets) == 4  # one read-ahead request per shard


def test_random_access_fetches_byte_ranges(s3, cache):
    paths = write_remote_shards(s3, "w3", [50])
    s3.requests.clear()
    ds = IndexedTFRecordDataset(paths, storage_options=s3.options, cache=None)
    shard = [r for r in s3.requests if r[0] == "GET" and r[1].endswith("data-train.tfrecord-00000-of-00001")]
    assert shard == []  # opening reads the index object, not the shard
    index = load_index(writer_index_path(paths[0]), storage_options=s3.options)
    s3.requests.clear()
    assert int(ds[37]["id"][0]) == 37
    gets = [r for r in s3.requests if r[0] == "GET" and r[1].endswith("data-train.tfrecord-00000-of-00001")]
    assert len(gets) == 1
    offset, size = (int(v) for v in index[37])
    assert gets[0][2] == f"bytes={offset}-{offset + size - 1}"  # just the record, not the object
    reader = IndexedReader(paths[0], storage_options=s3.options)
    assert [reader[i] for i in (3, 1)] == [list(read_records(paths[0], storage_options=s3.options))[i]
                                           for i in (3, 1)]


def test_remote_index_built_once_into_the_cache(s3, cache):
    url = "s3://bucket/noindex/a.tfrecord"
    with RecordWriter(url, storage_options=s3.options) as w:
        for i in range(20):
            w.write(make_example({"id": i}))
    assert len(TFRecordDataset(url, storage_options=s3.options)) == 20
    cached = list(cache.iterdir())
    assert len(cached) == 1
    s3.requests.clear()
    assert len(TFRecordDataset(url, storage_options=s3.options)) == 20
    full_reads = [r for r in s3.requests if r[0] == "GET" and "a.tfrecord" in r[1] and r[2] is None]
    assert full_reads == []  # no rescan: the cached index was used (checked with range reads)
    with RecordWriter(url, storage_options=s3.options) as w:  # the object changes
        for i in range(5):
            w.write(make_example({"id": i}))
    assert len(TFRecordDataset(url, storage_options=s3.options)) == 5
    assert len(list(cache.iterdir())) == 2


def test_converter_to_bucket_and_tfds_reader(s3, cache):
    source = torchvision.datasets.FakeData(size=12, image_size=(3, 8, 8), num_classes=3)
    write_dataset(source, "s3://bucket/conv", name="fake",
                  storage_options=s3.options, shards=ShardLayout(size=5), execution=Execution(progress=False))
    ds = tfds_dataset("s3://bucket/conv", "train", storage_options=s3.options)
    assert len(ds) == 12
    assert [int(d["label"]) for d in ds] == [source[i][1] for i in write_order(12)]


def test_transient_500_is_retried(s3, cache, only_our_retries, caplog):
    paths = write_remote_shards(s3, "w4", [30])
    s3.fault_path, s3.fail_500 = "w4/data-train", 1
    assert len(list(read_records(paths[0], storage_options=only_our_retries))) == 30
    assert s3.fail_500 == 0 and len(retried(caplog)) == 1


def test_dropped_connection_is_retried(s3, cache, only_our_retries, caplog):
    paths = write_remote_shards(s3, "w5", [30])
    ds = IndexedTFRecordDataset(paths, storage_options=only_our_retries, cache=None)  # a record's range
    s3.fault_path, s3.drop = "w5/data-train", 1
    assert int(ds[12]["id"][0]) == 12
    assert s3.drop == 0 and len(retried(caplog)) == 1
    s3.drop = 1  # and mid-stream
    assert len(list(read_records(paths[0], storage_options=only_our_retries))) == 30
    assert s3.drop == 0 and len(retried(caplog)) == 2


def test_permanent_fault_raises_with_the_url(s3, cache, monkeypatch, only_our_retries):
    from tfrecord_torch.io import retry

    monkeypatch.setattr(retry, "BACKOFF", 0.01)
    paths = write_remote_shards(s3, "w6", [10])
    ds = IndexedTFRecordDataset(paths, storage_options=only_our_retries, cache=None)  # a record's range
    s3.fault_path, s3.fail_500 = "w6/data-train", 10_000
    try:
        with pytest.raises(RemoteError) as info:
            ds[3]
    finally:
        s3.fail_500 = 0
    assert info.value.url == paths[0] and "bytes" in str(info.value)


def test_memory_filesystem_round_trip():
    url = "memory://mem/x.tfrecord"
    with RecordWriter(url) as w:
        for i in range(5):
            w.write(bytes([i]))
    build_index(url)
    assert IndexedReader(url)[3] == b"\x03"
    assert list(read_records(url)) == [bytes([i]) for i in range(5)]


def test_cli_on_urls(capsys):
    from tfrecord_torch.cli import main

    with RecordWriter("memory://cli/a.tfrecord") as w:
        for i in range(4):
            w.write(make_example({"i": i}))
    assert main(["index", "-q", "memory://cli/a.tfrecord"]) == 0
    assert main(["verify", "memory://cli/*.tfrecord"]) == 0
    assert "4 records, index memory://cli/a.tfrecord.index matches" in capsys.readouterr().out
    assert main(["head", "-n", "1", "memory://cli/a.tfrecord"]) == 0
    assert capsys.readouterr().out.strip() == '{"i": [0]}'


def test_cli_storage_options_reach_s3(s3, cache, capsys):
    from tfrecord_torch.cli import main

    write_remote_shards(s3, "cli", [6, 6])
    options = ["--storage-options", json.dumps(s3.options)]
    assert main(["verify", *options, "s3://bucket/cli/data-train.tfrecord-*"]) == 0
    out = capsys.readouterr().out
    assert out.count("OK ") == 2 and "6 records, index s3://bucket/cli/" in out
    assert main(["inspect", "--json", *options, "s3://bucket/cli"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 12


class _Files(http.server.BaseHTTPRequestHandler):
    """Serves ``files`` (path -> bytes) over HTTP; honours Range unless ``ranges`` is False."""

    files: dict = {}
    ranges = True

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        data = self.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        status, out, asked = 200, data, self.headers.get("Range")
        if asked and self.ranges:
            first, last = asked.split("=", 1)[1].split("-")
            first, last = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
            status, out = 206, data[first:last + 1]
        self.send_response(status)
        self.send_header("Content-Length", str(len(out)))
        self.send_header("Accept-Ranges", "bytes" if self.ranges else "none")
        if status == 206:
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        self.end_headers()
        if body:
            self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    _Files.files, _Files.ranges = {}, True


def test_http_urls_stream_and_seek(tmp_path, cache, http_server):
    local = write_shards(tmp_path, [5, 3])
    for p in local:
        build_index(p)
        for f in (p, Path(str(p) + ".index")):
            _Files.files[f"/d/{f.name}"] = f.read_bytes()
    urls = [f"{http_server}/d/{p.name}" for p in local]
    assert list(read_records(urls[0])) == list(read_records(local[0]))
    assert IndexedReader(urls[0])[3] == list(read_records(local[0]))[3]
    assert sorted(ids_of(DataLoader(TFRecordDataset(urls), batch_size=None, num_workers=2))) == list(range(8))
    _Files.ranges = False  # a server that ignores Range sends whole files: say so, don't misparse
    with pytest.raises(RemoteError, match="range requests"):
        IndexedReader(urls[0])
    assert list(read_records(urls[1])) == list(read_records(local[1]))  # streaming needs no ranges


@pytest.mark.timeout(120)
def test_workers_forked_after_the_parent_used_the_filesystem(s3, cache):
    # fsspec caches filesystem instances (and s3fs its event loop); a worker
    # forked from a parent that used one must open its own, not hang on the parent's.
    write_remote_shards(s3, "fork", [6, 6])
    cached = {k: v for k, v in s3.options.items() if k != "skip_instance_cache"}
    pattern = "s3://bucket/fork/data-train.tfrecord-*"
    ds = TFRecordDataset(pattern, storage_options=cached)
    assert sorted(ids_of(ds)) == list(range(12))  # the parent reads first: instance and loop exist
    for index in (None, False):
        ds = TFRecordDataset(pattern, storage_options=cached, source=Source(index=index, cache=None))
        assert sorted(ids_of(DataLoader(ds, batch_size=None, num_workers=2))) == list(range(12))


@pytest.mark.slow  # moto round trips: about 25 s on this loaded machine
def test_converter_to_bucket_fails_then_reruns_only_missing_shards(s3, tmp_path):
    """A task that keeps failing stops the run with complete shards uploaded and no
    metadata; nothing partial is visible; the rerun writes only the missing shards
    and the bucket then equals a local serial conversion byte for byte."""
    from unit.write.test_plan import Flaky

    counter = tmp_path / "fails"
    counter.write_text("9")
    url, fs = "s3://bucket/resume", s3.fs()
    last = int(write_order(20)[-1])  # a sample of the last shard: the first three get uploaded
    with pytest.raises(OSError, match="injected failure"):
        write_dataset(Flaky(counter, bad=last), url, name="k",
                      storage_options=s3.options, shards=ShardLayout(count=4),
                      execution=Execution(retries=1, progress=False))
    first = {p[len("bucket/resume/"):] for p in fs.find("bucket/resume")}
    assert "dataset_info.json" not in first
    shards = sorted(n for n in first if n.startswith("k-train"))
    assert all(f"index/{n}.index" in first for n in shards) and len(shards) == 3
    counter.write_text("0")
    again = Flaky(counter, bad=last)
    write_dataset(again, url, name="k", storage_options=s3.options, shards=ShardLayout(count=4),
                  execution=Execution(progress=False))
    assert again.calls == 5 * (4 - len(shards))  # the uploaded shards were kept
    write_dataset(Flaky(tmp_path / "none"), tmp_path / "ref", name="k", shards=ShardLayout(count=4),
                  execution=Execution(progress=False))
    fs.invalidate_cache()
    remote = {p[len("bucket/resume/"):]: p for p in fs.find("bucket/resume")}  # hidden objects too: no markers
    assert sorted(remote) == listing(tmp_path / "ref")  # remote indexes need no stamps (ETag-keyed)
    for name, key in remote.items():
        assert fs.cat_file(key) == (tmp_path / "ref" / name).read_bytes(), name


@pytest.mark.parametrize("stream", [None, 64 << 10])
def test_a_streamed_shards_requests_fetch_the_budgets_stream_ahead(s3, stream):
    """A compressed shard is read as a stream: each request fetches
    ``ReadBudget.stream`` bytes past what the stream asks for (16 MiB unless
    given: a 3 MB shard in one request)."""
    rng = np.random.default_rng(0)
    path = "s3://bucket/stream/z.tfrecord.gz"
    with RecordWriter(path, compression="gzip", storage_options=s3.options) as w:
        for i in range(3000):
            w.write(make_example({"id": i, "noise": rng.bytes(1000)}))
    size = s3.fs().size(path)
    budget = ReadBudget() if stream is None else ReadBudget(stream=stream)
    s3.requests.clear()
    ds = TFRecordDataset(path, features={"id": Int64()}, storage_options=s3.options,
                         source=Source(cache=None, read_budget=budget))
    assert [int(x["id"]) for x in ds] == list(range(3000))
    spans = []
    for method, p, r in s3.requests:
        if method == "GET" and p.endswith("/z.tfrecord.gz") and r:
            first, last = map(int, r.removeprefix("bytes=").split("-"))
            spans.append(min(last, size - 1) - first + 1)
    spans = [n for n in spans if n > 12]  # the compression sniffed when the dataset is made
    if stream is None:
        assert spans == [size]
    else:
        # the stream's first read: the 12 bytes that tell the compression, and the budget past them
        assert spans[0] == 12 + stream and len(spans) > 2 and max(spans) <= (1 << 20) + stream
