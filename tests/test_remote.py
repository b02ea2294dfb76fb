"""Remote shards through fsspec, against a real S3 endpoint on 127.0.0.1
(moto's server) that logs every request and can inject faults."""

import os
import threading

import numpy as np
import pytest
import torchvision
from torch.utils.data import DataLoader

from helpers import ids_of
from tfrecord_torch import (IndexedReader, IndexedTFRecordDataset, RecordWriter, ShardedWriter,
                            TFRecordDataset, build_index, load_index, make_example, read_records,
                            tfds_dataset, write_dataset)
from tfrecord_torch.fs import RemoteError
from tfrecord_torch.shards import expand_paths


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
        self.options = {"key": "test", "secret": "test", "skip_instance_cache": True,
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


def _cut(body):
    yield body[: len(body) // 2]
    raise ConnectionResetError("injected: connection dropped mid-body")


@pytest.fixture(scope="module")
def s3():
    import urllib.request

    server = S3()
    endpoint = server.options["client_kwargs"]["endpoint_url"]
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bucket", method="PUT")).read()
    yield server
    server.close()


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
    assert names == [f"data-train.tfrecord-0000{i}-of-00003{x}" for i in range(3) for x in ("", ".index")]
    assert paths[0] == "s3://bucket/w1/data-train.tfrecord-00000-of-00003"
    assert load_index(paths[2] + ".index", storage_options=s3.options).shape == (5, 2)
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


def test_random_access_fetches_byte_ranges(s3, cache):
    paths = write_remote_shards(s3, "w3", [50])
    ds = IndexedTFRecordDataset(paths, storage_options=s3.options)
    index = load_index(paths[0] + ".index", storage_options=s3.options)
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
    write_dataset(source, "s3://bucket/conv", name="fake", shard_size=5, progress=False,
                  storage_options=s3.options)
    ds = tfds_dataset("s3://bucket/conv", "train", storage_options=s3.options)
    assert len(ds) == 12
    assert [int(d["label"]) for d in ds] == [source[i][1] for i in range(12)]


def test_transient_500_is_retried(s3, cache):
    paths = write_remote_shards(s3, "w4", [30])
    s3.fault_path, s3.fail_500 = "w4/data-train", 1
    assert len(list(read_records(paths[0], storage_options=s3.options))) == 30
    assert s3.fail_500 == 0


def test_dropped_connection_is_retried(s3, cache):
    paths = write_remote_shards(s3, "w5", [30])
    ds = IndexedTFRecordDataset(paths, storage_options=s3.options)
    s3.fault_path, s3.drop = "w5/data-train", 1
    assert int(ds[12]["id"][0]) == 12
    assert s3.drop == 0


def test_permanent_fault_raises_with_the_url(s3, cache, monkeypatch):
    from tfrecord_torch import fs

    monkeypatch.setattr(fs, "BACKOFF", 0.01)
    paths = write_remote_shards(s3, "w6", [10])
    # s3fs and botocore retry on their own too; keep that short here
    impatient = {**s3.options, "config_kwargs": {"retries": {"max_attempts": 1}}}
    ds = IndexedTFRecordDataset(paths, storage_options=impatient)
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
