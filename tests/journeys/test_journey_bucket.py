"""A TF team's shards in an S3 bucket (moto's server on 127.0.0.1), read the ways
docs/guide/remote.md shows: shuffled through DataLoader workers, in order, at random
with a sampler, with the shard cache's default and with a ShardCache of the user's.
The bucket's prefix is left as it was, and the mistakes a user makes with a bucket
and its cache get the library's own message, or a read that goes on from the bucket.

TensorFlow writes the shards (uploaded as a TF team uploads a folder) and is the oracle."""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import subprocess
import sys

import pytest
import tensorflow as tf
from scenarios.test_remote import S3, with_bucket
from torch.utils.data import DataLoader, RandomSampler
from torchvision.transforms import v2

from journeys.tf_team import DESCRIPTION, write_tf_team_shards
from tfrecord_torch import (
    CorruptRecordError,
    IndexedTFRecordDataset,
    ReadBudget,
    ShardCache,
    Source,
    TFRecordDataset,
    presets,
)
from tfrecord_torch.errors import RemoteError
from tfrecord_torch.io import retry

SHARDS = 3
PER_SHARD = 8
PREFIX = "s3://bucket/tf-team/train"


@pytest.fixture(scope="module")
def s3():
    yield from with_bucket(S3())


@pytest.fixture(scope="module")
def bucket(s3, tmp_path_factory):
    """A TF team's shards (tf.io.TFRecordWriter, JPEGs of mixed sizes), uploaded
    folder and all: the labels as TensorFlow reads them, in file order, and the
    local folder they were uploaded from."""
    folder = tmp_path_factory.mktemp("tf_team")
    write_tf_team_shards(folder, SHARDS, PER_SHARD)
    s3.fs().put(f"{folder}/", PREFIX.split("://", 1)[1] + "/", recursive=True)
    files = sorted(tf.io.gfile.glob(str(folder / "train-*")))
    labels = [int(tf.io.parse_single_example(r, DESCRIPTION)["image/class/label"])
              for r in tf.data.TFRecordDataset(files)]
    return labels, folder


@pytest.fixture(scope="module")
def labels(bucket):
    return bucket[0]  # TensorFlow's labels of the shards under PREFIX


def objects(s3) -> dict[str, str]:
    """Every object under the bucket's prefix with its ETag."""
    return {info["name"]: info["ETag"] for info in s3.fs().find(PREFIX, detail=True).values()}


def crop():
    return v2.RandomResizedCrop(16, antialias=True)


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_a_tf_teams_bucket_read_shuffled_in_order_and_at_random_leaves_the_prefix_as_it_was(s3, labels, tmp_path,
                                                                                            monkeypatch):
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(tmp_path / "shards"))  # the default cache's folder
    before = objects(s3)
    so = s3.options
    ds = TFRecordDataset(f"{PREFIX}/train-*", features=presets.slim(), shuffle=True, storage_options=so,
                         transform=crop())
    loader = DataLoader(ds, batch_size=4, num_workers=2)
    for epoch in range(2):  # epoch 0 copies the shards; epoch 1 reads the copies
        ds.set_epoch(epoch)
        got = [int(v) for batch in loader for v in batch["label"]]
        assert sorted(got) == sorted(labels) and got != labels
    in_order = TFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=so)
    assert [int(item["label"]) for item in in_order] == labels  # TensorFlow's order
    mapped = IndexedTFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=so, transform=crop())
    assert [int(mapped[i]["label"]) for i in (0, len(mapped) - 1)] == [labels[0], labels[-1]]
    sampled = DataLoader(mapped, batch_size=4, sampler=RandomSampler(mapped), num_workers=2)
    assert sorted(int(v) for batch in sampled for v in batch["label"]) == sorted(labels)
    copies = ShardCache(str(tmp_path / "mine"), limit=1 << 30)
    mine = TFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=so, source=Source(cache=copies))
    assert [int(item["label"]) for item in mine] == labels
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    shown = subprocess.run([sys.executable, "-m", "tfrecord_torch.cli", "cache"], capture_output=True, text=True,
                           env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"{tmp_path / 'shards'}: {SHARDS} shard copies" in shown.stdout
    for args, says in ((["inspect", f"{PREFIX}/"], f"records: {len(labels)} "),  # the read-only commands
                       (["verify", f"{PREFIX}/train-*"], f"{PREFIX}/train-00002-of-{SHARDS:05d}: {PER_SHARD} records")):
        done = subprocess.run([sys.executable, "-m", "tfrecord_torch.cli", *args, "--storage-options", json.dumps(so)],
                              capture_output=True, text=True, env=env)
        assert done.returncode == 0, (args, done.stderr)
        assert says in done.stdout, done.stdout
    assert objects(s3) == before  # no index, partial or lock object; no object rewritten


def test_a_shard_cache_folder_that_cannot_be_made_reads_from_the_bucket(s3, labels, tmp_path, caplog):
    """A ShardCache whose folder cannot be made (a file where a folder of its path
    should be): the records come from the bucket, with a warning naming the folder."""
    (tmp_path / "scratch").write_bytes(b"")  # the user meant a folder
    copies = ShardCache(str(tmp_path / "scratch" / "shards"))
    ds = TFRecordDataset(f"{PREFIX}/", features=presets.slim(), shuffle=True, storage_options=s3.options,
                         transform=crop(), source=Source(cache=copies))
    got = [int(v) for batch in DataLoader(ds, batch_size=4, num_workers=2) for v in batch["label"]]
    assert sorted(got) == sorted(labels)
    in_order = TFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=s3.options,
                               source=Source(cache=copies))
    with caplog.at_level(logging.WARNING, logger="tfrecord_torch.io.shardcache"):
        for _ in range(2):
            assert [int(item["label"]) for item in in_order] == labels
    (line,) = [r.getMessage() for r in caplog.records if "shard cache" in r.getMessage()]  # once
    assert f"shard cache {tmp_path / 'scratch' / 'shards'} is not usable" in line
    assert "reading from the bucket" in line
    mapped = IndexedTFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=s3.options,
                                    transform=crop(), cache=copies)
    sampled = DataLoader(mapped, batch_size=4, sampler=RandomSampler(mapped), num_workers=2)
    assert sorted(int(v) for batch in sampled for v in batch["label"]) == sorted(labels)


def test_an_index_cache_folder_that_cannot_be_made_builds_the_indexes_again(s3, labels, tmp_path, monkeypatch):
    """The TF team's shards have no index objects: their indexes are built and
    kept in the index cache. A cache folder under a file keeps none, and the
    shards read as TensorFlow reads them."""
    (tmp_path / "home").write_bytes(b"")
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "home" / "index"))
    ds = TFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=s3.options, source=Source(cache=None))
    assert [int(item["label"]) for item in ds] == labels
    mapped = IndexedTFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=s3.options,
                                    transform=crop(), cache=None)
    sampled = DataLoader(mapped, batch_size=4, sampler=RandomSampler(mapped), num_workers=2)
    assert sorted(int(v) for batch in sampled for v in batch["label"]) == sorted(labels)


def test_the_cache_given_where_the_other_dataset_takes_it_says_where_it_goes(s3, labels):
    copies = ShardCache("/scratch/shards")
    with pytest.raises(TypeError, match=r"TFRecordDataset\(paths, source=Source\(cache=ShardCache\(") as info:
        TFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=s3.options, cache=copies)
    assert "IndexedTFRecordDataset" in str(info.value)


def test_the_map_style_dataset_takes_its_source_as_the_other_does(s3, labels):
    """``source=Source(...)`` spelled as for TFRecordDataset: the same reads as its keywords."""
    mapped = IndexedTFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=s3.options,
                                    source=Source(cache=None))
    assert [int(mapped[i]["label"]) for i in range(len(mapped))] == labels
    with pytest.raises(ValueError, match=r"takes cache in its source= or as keywords, not both"):
        IndexedTFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=s3.options,
                               source=Source(cache=None), cache=ShardCache("/scratch/shards"))


@pytest.mark.parametrize("url, says", [
    (f"{PREFIX}/val-*", "no files match"),  # a glob matching nothing
    ("s3://bucket/tf-team/validation/", "no such file or prefix"),  # a prefix that does not exist
    ("s3://no-such-bucket/tf-team/train/", "no such bucket: s3://no-such-bucket "),
    ("s3://no-such-bucket/tf-team/train/train-*", "no such object or bucket"),
])
def test_a_bucket_path_that_finds_no_shards_names_the_url(s3, labels, url, says):
    for make in (TFRecordDataset, IndexedTFRecordDataset):
        with pytest.raises(FileNotFoundError, match=says) as info:
            make(url, features=presets.slim(), storage_options=s3.options)
        assert url in str(info.value)


def test_a_prefix_holding_two_splits_is_refused_with_the_glob_of_each(s3, tmp_path):
    """A TF team's folder of train and validation shards, uploaded whole: the prefix read
    as a folder would mix the splits, so it is refused naming each split's glob, and the
    glob it names reads what tf.data reads from the folder through the same glob."""
    folder = tmp_path / "tfteam"
    folder.mkdir()
    write_tf_team_shards(folder, 2, 3)
    write_tf_team_shards(folder, 1, 2, split="validation", first=100)
    prefix = "s3://bucket/two-splits"
    s3.fs().put(f"{folder}/", prefix.split("://", 1)[1] + "/", recursive=True)
    says = (f"folder {prefix}/ holds 2 splits: train (2 shards: '{prefix}/train-*'), validation (1 shard: "
            f"'{prefix}/validation-*'); a folder path would read them all as one dataset: pass the glob of the "
            "split you want")
    for make in (TFRecordDataset, IndexedTFRecordDataset):
        with pytest.raises(ValueError) as info:
            make(f"{prefix}/", features=dict(DESCRIPTION), storage_options=s3.options)
        assert says in str(info.value)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "tfrecord_torch.cli", "inspect", f"{prefix}/", "--storage-options",
                           json.dumps(s3.options)], capture_output=True, text=True, env=env)
    assert done.returncode == 1 and says in done.stderr, done.stderr
    files = sorted(tf.io.gfile.glob(str(folder / "validation-*")))
    theirs = [int(tf.io.parse_single_example(r, DESCRIPTION)["image/class/label"])
              for r in tf.data.TFRecordDataset(files)]
    ours = TFRecordDataset(f"{prefix}/validation-*", features=dict(DESCRIPTION), storage_options=s3.options)
    assert [int(item["image/class/label"]) for item in ours] == theirs == [100, 101]


def test_an_endpoint_nobody_answers_names_the_url_and_what_to_check(monkeypatch):
    """A closed port as the endpoint: after the retries, a RemoteError naming
    the URL and the endpoint setting to check (botocore's own retries are
    turned off, and the backoff shortened, to keep the test short)."""
    monkeypatch.setattr(retry, "BACKOFF", 0.01)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    so = {"key": "test", "secret": "test",
          "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
          "config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}}}
    for url in (f"{PREFIX}/", f"{PREFIX}/train-*", f"{PREFIX}/train-00000-of-00003"):
        for make in (TFRecordDataset, IndexedTFRecordDataset):
            with pytest.raises(RemoteError) as info:
                make(url, features=presets.slim(), storage_options=so)
            assert url in str(info.value)
            assert "no connection to the server could be made" in str(info.value)
            assert "endpoint_url" in str(info.value)


def frame_offsets(path) -> list[int]:
    """Each record's byte offset in a TFRecord file, from its framing (12-byte
    header, payload, 4-byte CRC)."""
    data, offsets, at = path.read_bytes(), [], 0
    while at < len(data):
        offsets.append(at)
        at += 12 + struct.unpack_from("<Q", data, at)[0] + 4
    return offsets


def test_a_corrupt_record_in_the_bucket_names_the_url_record_and_offset(s3, bucket, tmp_path, monkeypatch):
    """One payload byte of a TF team's shard flipped in the bucket: the error
    names the object's URL (not a local copy), the record and its offset; under
    on_error="skip" every other record is read."""
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(tmp_path / "shards"))
    labels, folder = bucket
    shard = folder / f"train-00001-of-{SHARDS:05d}"
    record = 5
    offset = frame_offsets(shard)[record]
    data = bytearray(shard.read_bytes())
    data[offset + 12 + 40] ^= 0xFF  # inside the JPEG
    url = f"s3://bucket/tf-team/damaged/{shard.name}"
    s3.fs().pipe(url.split("://", 1)[1], bytes(data))
    for make in (TFRecordDataset, IndexedTFRecordDataset):
        with pytest.raises(CorruptRecordError) as info:
            make(url, features=presets.slim(), storage_options=s3.options)
        assert f"{url}: record {record} at byte offset {offset}" in str(info.value)
    ds = TFRecordDataset(url, features=presets.slim(), shuffle=True, storage_options=s3.options, on_error="skip",
                         transform=crop())
    got = [int(v) for batch in DataLoader(ds, batch_size=4, num_workers=2) for v in batch["label"]]
    wanted = labels[PER_SHARD:2 * PER_SHARD]
    assert sorted(got) == wanted[:record] + wanted[record + 1:]


def test_no_credentials_anywhere_says_where_to_give_them_at_once(s3, labels, tmp_path, monkeypatch, caplog):
    """storage_options with the endpoint but no key, and none in the environment
    or a profile: one RemoteError naming the URL and where credentials go, not
    retried (asking again finds none)."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    so = {"client_kwargs": s3.options["client_kwargs"]}
    for make in (TFRecordDataset, IndexedTFRecordDataset):
        with pytest.raises(RemoteError) as info:
            make(f"{PREFIX}/", features=presets.slim(), storage_options=so)
        assert f"{PREFIX}/" in str(info.value)
        assert "no credentials" in str(info.value) and "storage_options" in str(info.value)
    assert not [r for r in caplog.records if r.name == "tfrecord_torch.io.retry" and "retrying" in r.getMessage()]


@pytest.mark.parametrize("cache", ["copies", None], ids=["copies", "ranges"])
def test_a_tf_teams_bucket_read_with_a_small_first_read_gives_tensorflows_records(s3, labels, tmp_path, cache):
    """Source(read_budget=) as the remote guide shows it: first reads, windows
    and a copy's first ranges of 2 KiB, doubling; every record TensorFlow
    reads, in its order, and shuffled, each once."""
    budget = ReadBudget(first=2048)
    copies = ShardCache(str(tmp_path / "shards"), limit=1 << 30) if cache else None
    source = Source(cache=copies, read_budget=budget)
    in_order = TFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=s3.options, source=source)
    assert [int(item["label"]) for item in in_order] == labels  # TensorFlow's order
    shuffled = TFRecordDataset(f"{PREFIX}/", features=presets.slim(), storage_options=s3.options, source=source,
                               shuffle=True, seed=3)
    assert sorted(int(item["label"]) for item in shuffled) == sorted(labels)


def test_a_tf_teams_bucket_without_index_objects_starts_at_once_and_reads_each_shard_once(s3, labels, tmp_path,
                                                                                           monkeypatch):
    """As docs/guide/remote.md shows it: the dataset is made without reading a shard,
    epoch 0 streams each shard once through DataLoader workers (len() says why it is
    unknown), and epoch 1 reads the global permutation by the indexes epoch 0 cached,
    from the copies it kept: TensorFlow's records both times, no shard fetched again."""
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "index"))  # a machine that has indexed nothing
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(tmp_path / "shards"))
    s3.requests.clear()
    ds = TFRecordDataset(f"{PREFIX}/train-*", features=presets.slim(), shuffle=True, storage_options=s3.options,
                         transform=crop())
    shard_gets = [r for r in s3.requests if r[0] == "GET" and "/train-0" in r[1]]
    assert shard_gets == []  # not one byte of a shard to make it
    with pytest.raises(TypeError, match="len\\(\\) is unknown in epoch 0"):
        len(ds)
    loader = DataLoader(ds, batch_size=4, num_workers=2)
    got = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        s3.requests.clear()
        got.append([int(v) for batch in loader for v in batch["label"]])
        assert sorted(got[-1]) == sorted(labels)
        shard_gets = [r for r in s3.requests if r[0] == "GET" and "/train-0" in r[1]]
        assert (len({r[1] for r in shard_gets}) == SHARDS) if epoch == 0 else shard_gets == []
    assert got[0] != got[1] and len(ds) == len(labels)  # epoch 1 counts the records
