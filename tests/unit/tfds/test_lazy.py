"""A TFDS folder without index files: len() from shardLengths without reading,
indexing when first read (with a progress bar if asked), counts checked."""

import json
import pickle
import shutil

import pytest
import torchvision

from tfrecord_torch import (
    Execution,
    ShardLayout,
    Source,
    TFRecordDataset,
    TFRecordError,
    tfds_dataset,
    write_dataset,
)


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    data = torchvision.datasets.FakeData(size=30, image_size=(3, 8, 8), num_classes=3, random_offset=1)
    write_dataset(data, tmp_path, name="fake", shards=ShardLayout(size=8),
                  execution=Execution(progress=False))
    shutil.rmtree(tmp_path / "index")  # no index files: as TFDS writes a folder
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    return tmp_path


def cached(folder):
    """The indexes the reads built (kept in the local index cache, not in the folder)."""
    cache = folder.parent / f"{folder.name}-cache"
    return sorted(cache.iterdir()) if cache.exists() else []


def lengths(folder):
    info = json.loads((folder / "dataset_info.json").read_text())
    return [int(n) for n in next(s for s in info["splits"] if s["name"] == "train")["shardLengths"]]


def shards(folder):
    return sorted(p for p in folder.glob("fake-train.tfrecord-*") if not p.name.endswith((".index", ".json")))


def test_len_comes_from_shard_lengths_without_reading(folder):
    originals = {p: p.read_bytes() for p in shards(folder)}
    for p in originals:  # garbage of another size: reading any shard would fail
        p.write_bytes(b"\x00not a record file")
    ds = tfds_dataset(folder, "train", batch_size=4)
    assert ds.counts == lengths(folder) and len(ds) == 8  # ceil(30 / 4) batches
    assert len(tfds_dataset(folder, "train")) == 30
    with pytest.raises(TFRecordError):
        next(iter(ds))  # reading needs the offsets: now the shards are looked at
    for p, data in originals.items():
        p.write_bytes(data)
    ds = tfds_dataset(folder, "train")
    assert not cached(folder)  # still nothing indexed
    assert len(list(ds)) == 30 and len(cached(folder)) == 4  # indexed when first read
    assert not (folder / "index").exists()  # and nothing written into the folder


def test_a_shard_holding_another_count_is_named(folder, tmp_path):
    first, last = shards(folder)[0], shards(folder)[-1]
    last.write_bytes(first.read_bytes() * 2)  # twice the first shard's records
    said, held = lengths(folder)[-1], 2 * lengths(folder)[0]
    with pytest.raises(TFRecordError, match=rf"{last.name}: .*says {said} records, but the shard holds {held}"):
        list(tfds_dataset(folder, "train"))


def test_progress_bar_while_indexing(folder, capsys):
    list(tfds_dataset(folder, "train", source=Source(progress=True)))
    assert "indexing 4 shards" in capsys.readouterr().err
    list(tfds_dataset(folder, "train", source=Source(progress=True)))  # indexed now: nothing to show
    assert capsys.readouterr().err == ""
    for index in cached(folder):
        index.unlink()
    list(tfds_dataset(folder, "train"))  # default: only on a terminal
    assert capsys.readouterr().err == ""


def test_lengths_are_checked_and_the_dataset_pickles(folder):
    paths = [str(p) for p in shards(folder)]
    with pytest.raises(ValueError, match="3 record counts for 4 shards"):
        TFRecordDataset(paths, source=Source(lengths=lengths(folder)[:3]))
    with pytest.raises(ValueError, match="cannot go with index=False"):
        Source(lengths=lengths(folder), index=False)
    ds = pickle.loads(pickle.dumps(TFRecordDataset(paths, source=Source(lengths=lengths(folder)))))
    assert len(ds) == 30 and len(list(ds)) == 30
