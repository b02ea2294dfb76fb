"""More ranks than streamed shards: TF team's GZIP shards (or shards read with
``Source(index=False)``) are dealt whole, so a rank dealt none would read nothing
and DistributedDataParallel would wait for it forever. That is an error naming the
remedy, on every rank when the shards are fewer than the ranks, on the rank left
without a shard when DataLoader workers make the readers outnumber the shards; a
DataLoader worker left without a shard warns. Every record is still read once.

TensorFlow writes the shards and is the oracle."""

from __future__ import annotations

import os
import warnings

import pytest
import tensorflow as tf
from torch.utils.data import DataLoader

from tfrecord_torch import Int64, Sharding, Source, TFRecordDataset


def write_gzip_shards(folder, shards, per_shard=5):
    """``shards`` GZIP files written by tf.io.TFRecordWriter, ids 0, 1, ... in file order."""
    paths = []
    for s in range(shards):
        path = folder / f"train-{s:05d}-of-{shards:05d}.gz"
        with tf.io.TFRecordWriter(str(path), options="GZIP") as w:
            for i in range(s * per_shard, (s + 1) * per_shard):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))})).SerializeToString())
        paths.append(path)
    return paths


def tf_ids(paths) -> list[int]:
    description = {"id": tf.io.FixedLenFeature([], tf.int64)}
    return [int(tf.io.parse_single_example(r, description)["id"])
            for r in tf.data.TFRecordDataset([str(p) for p in paths], compression_type="GZIP")]


@pytest.mark.parametrize("source", [None, Source(index=False)], ids=["gzip", "index=False"])
def test_fewer_streamed_shards_than_ranks_is_an_error_on_every_rank(tmp_path, source):
    paths = write_gzip_shards(tmp_path, 1)
    if source is not None:  # the same records, uncompressed, read without an index
        plain = tmp_path / "plain.tfrecord"
        with tf.io.TFRecordWriter(str(plain)) as w:
            for record in tf.data.TFRecordDataset(str(paths[0]), compression_type="GZIP"):
                w.write(record.numpy())
        paths = [plain]
    remedy = r"decompress them" if source is None else r"leave index= at its default"
    for rank in range(2):
        with pytest.raises(ValueError, match=rf"1 streamed shard\(s\) for 2 ranks: shards are dealt whole, so "
                                             rf"rank 1 reads nothing.*DistributedDataParallel.*{remedy}"):
            TFRecordDataset(paths, features={"id": Int64()}, source=source,
                            sharding=Sharding(rank=rank, world_size=2))


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_a_rank_left_without_a_shard_by_its_workers_raises(tmp_path):
    """2 shards, 2 ranks x 2 DataLoader workers: rank 0's workers take both shards."""
    paths = write_gzip_shards(tmp_path, 2)
    read = []
    for rank in range(2):
        ds = TFRecordDataset(paths, features={"id": Int64()}, sharding=Sharding(rank=rank, world_size=2))
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        if rank == 1:
            with pytest.raises(ValueError, match=r"rank 1 reads nothing with 2 DataLoader workers per rank.*"
                                                 r"decompress them"):
                list(loader)
        else:
            read += [int(x["id"]) for x in loader]
    assert sorted(read) == sorted(tf_ids(paths))  # rank 0 alone read them: the job cannot step in lockstep


def test_an_idle_worker_warns_and_every_record_is_read_once(tmp_path, capfd):
    paths = write_gzip_shards(tmp_path, 2)
    ds = TFRecordDataset(paths, features={"id": Int64()})
    with warnings.catch_warnings():  # the workers, forked here, write it to the shared stderr
        warnings.simplefilter("default", RuntimeWarning)
        warnings.showwarning = lambda message, category, *_, **__: os.write(
            2, f"{category.__name__}: {message}\n".encode())
        got = sorted(int(x["id"]) for x in DataLoader(ds, batch_size=None, num_workers=3))
    assert got == sorted(tf_ids(paths))
    err = capfd.readouterr().err
    assert "RuntimeWarning: TFRecordDataset: DataLoader worker 2 of 3 reads nothing: 2 streamed shard(s) are " \
           "dealt whole to 3 DataLoader workers" in err
    assert "worker 0 of 3 reads nothing" not in err and "worker 1 of 3 reads nothing" not in err
