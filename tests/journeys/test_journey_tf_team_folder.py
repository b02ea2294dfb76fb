"""A TF team's folder, read the ways the README shows, is left exactly as it was: no file
appears or changes in it, and the TF team's own glob and tf.data read it as before.
The same for what this library writes: the usual TF globs over its shard names match
shards only, and tf.data reads every record through them.

TensorFlow writes the data and is the oracle."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
import tensorflow as tf
import torch
import torchvision
from torchvision.transforms import v2

from journeys.tf_team import DESCRIPTION, write_tf_team_shards
from tfrecord_torch import (
    Execution,
    IndexedReader,
    IndexedTFRecordDataset,
    ShardLayout,
    Source,
    TFRecordDataset,
    parse_example,
    presets,
    read_records,
    write_dataset,
)

SHARDS = 3
PER_SHARD = 6


def _snapshot(folder) -> dict:
    """Every entry under ``folder`` (hidden ones too) with its size and modification time."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.stat(path)
            found[os.path.relpath(path, folder)] = (st.st_size if name in files else -1, st.st_mtime_ns)
    return found


@pytest.fixture()
def tf_folder(tmp_path):
    """Shards as a TF team writes them: tf.io.TFRecordWriter, JPEGs of mixed sizes."""
    folder = tmp_path / "tf_team"
    folder.mkdir()
    write_tf_team_shards(folder, SHARDS, PER_SHARD)
    return folder


def _tf_team_reads(folder) -> list[int]:
    files = tf.io.gfile.glob(os.path.join(str(folder), "train-*"))
    ds = tf.data.TFRecordDataset(files)
    return sorted(int(tf.io.parse_single_example(r, DESCRIPTION)["image/class/label"]) for r in ds)


def test_every_reader_leaves_the_tf_teams_folder_as_it_was(tf_folder):
    before = _snapshot(tf_folder)
    labels = list(range(SHARDS * PER_SHARD))
    features = presets.slim()  # image/encoded decoded, image/class/label
    transform = v2.Compose([v2.RandomResizedCrop(16, antialias=True), v2.RandomHorizontalFlip()])

    def label_of(item):
        return int(item["label"] if "label" in item else item["image/class/label"])

    # The README's main call, in order, shuffled, through DataLoader workers, in batch mode.
    assert sorted(map(label_of, TFRecordDataset(tf_folder, features=dict(DESCRIPTION)))) == labels  # TF's own spec
    ds = TFRecordDataset(tf_folder, features=features, shuffle=True, transform=transform)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
    assert sorted(int(v) for batch in loader for v in batch["label"]) == labels
    batches = TFRecordDataset(tf_folder, features=features, batch_size=4, transform=transform)
    assert sorted(int(v) for b in torch.utils.data.DataLoader(batches, batch_size=None)
                  for v in b["label"]) == labels
    # Random access: the map-style dataset, a sampler, the record-level reader.
    mapped = IndexedTFRecordDataset(tf_folder, features=features)
    assert sorted(label_of(mapped[i]) for i in range(len(mapped))) == labels
    first = sorted(glob.glob(str(tf_folder / "train-*")))[0]
    assert [int(parse_example(IndexedReader(first)[i])["image/class/label"][0]) for i in range(3)] == [0, 1, 2]
    assert sum(1 for _ in read_records(first)) == PER_SHARD
    # The command line's read-only commands.
    for args in (["inspect", str(tf_folder)], ["head", "-n", "2", str(tf_folder)], ["verify", str(tf_folder)],
                 ["cat", first, "--bytes", "length"]):
        proc = subprocess.run([sys.executable, "-m", "tfrecord_torch.cli", *args], capture_output=True, text=True)
        assert proc.returncode == 0, (args, proc.stderr)

    assert _snapshot(tf_folder) == before  # nothing written, nothing touched
    assert _tf_team_reads(tf_folder) == labels  # and the TF team's pipeline still reads it all


def test_indexes_beside_shards_only_when_asked(tf_folder):
    before = set(os.listdir(tf_folder))
    assert len(TFRecordDataset(tf_folder, source=Source(index="beside"))) == SHARDS * PER_SHARD
    added = set(os.listdir(tf_folder)) - before
    assert added == {f"train-{s:05d}-of-{SHARDS:05d}{x}" for s in range(SHARDS) for x in (".index", ".index.json")}
    mapped = IndexedTFRecordDataset(tf_folder)  # indexes beside shards keep being found
    assert len(mapped) == SHARDS * PER_SHARD


def test_what_the_library_writes_is_globbed_as_shards_only(tmp_path):
    source = torchvision.datasets.FakeData(size=24, image_size=(3, 12, 10), num_classes=4, random_offset=1)
    out = tmp_path / "out"
    paths = write_dataset(source, out, name="fake", shards=ShardLayout(size=8),
                          execution=Execution(progress=False))
    shards = sorted(paths)
    for pattern in ("fake-train*", "*.tfrecord*", "*-of-*"):
        matched = sorted(tf.io.gfile.glob(os.path.join(str(out), pattern)))
        assert matched == shards, pattern
        assert sum(1 for _ in tf.data.TFRecordDataset(matched)) == 24
    hidden = [n for n in os.listdir(out) if n.startswith(".")]
    assert hidden == []  # no completion markers, no partial files, no lock files
    # The indexes are where the README says, and this library finds them without scanning.
    assert sorted(os.listdir(out / "index")) == sorted(
        [os.path.basename(p) + x for p in shards for x in (".index", ".index.json")])
    assert len(IndexedTFRecordDataset(out)) == 24


@pytest.fixture()
def two_splits(tmp_path):
    """A TF team's folder as it is usually kept: train-0000{0..3}-of-00004 beside
    validation-00000-of-00001 (tf.io.TFRecordWriter), and a labels.txt."""
    folder = tmp_path / "tfteam"
    folder.mkdir()
    write_tf_team_shards(folder, 4, PER_SHARD)
    write_tf_team_shards(folder, 1, 5, split="validation", first=1000)
    (folder / "labels.txt").write_text("0:cat\n1:dog\n")
    return folder


def _tf_reads(pattern: str) -> list[int]:
    """The labels tf.data reads through the TF team's glob, in order."""
    files = sorted(tf.io.gfile.glob(pattern))
    return [int(tf.io.parse_single_example(r, DESCRIPTION)["image/class/label"]) for r in tf.data.TFRecordDataset(files)]


def test_a_folder_holding_two_splits_is_refused_with_the_glob_of_each(two_splits):
    """Read as a folder, train and validation would be one dataset of 29 records, without a
    word: every entry point refuses the folder, names both splits and the glob of each, and
    the glob it names reads exactly what tf.data reads through it."""
    folder = str(two_splits)
    train, validation = os.path.join(folder, "train-*"), os.path.join(folder, "validation-*")
    says = (f"folder {folder} holds 2 splits: train (4 shards: {train!r}), validation (1 shard: {validation!r}); "
            "a folder path would read them all as one dataset: pass the glob of the split you want")
    for make in (TFRecordDataset, IndexedTFRecordDataset):
        for path, named in ((two_splits, folder), (folder + "/", folder + "/")):
            with pytest.raises(ValueError) as info:
                make(path, features=dict(DESCRIPTION))
            assert says.replace(f"folder {folder} ", f"folder {named} ") in str(info.value)
    for args in (["inspect", folder], ["verify", folder], ["index", folder], ["head", "-n", "1", folder]):
        proc = subprocess.run([sys.executable, "-m", "tfrecord_torch.cli", *args], capture_output=True, text=True)
        assert proc.returncode == 1 and says in proc.stderr, (args, proc.stderr)
    # The globs the error names, read as the docs show, give what tf.data gives through them.
    assert [int(item["image/class/label"]) for item in TFRecordDataset(train, features=dict(DESCRIPTION))] \
        == _tf_reads(train) == list(range(4 * PER_SHARD))
    mapped = IndexedTFRecordDataset(validation, features=dict(DESCRIPTION))
    assert [int(mapped[i]["image/class/label"]) for i in range(len(mapped))] == _tf_reads(validation) \
        == list(range(1000, 1005))
    assert len(TFRecordDataset(os.path.join(folder, "*"))) == 4 * PER_SHARD + 5  # all of it, when asked for


def test_a_folder_of_one_split_beside_other_files_reads_as_before(two_splits):
    for name in os.listdir(two_splits):
        if name.startswith("validation-"):
            os.remove(two_splits / name)
    (two_splits / "notes.tfrecord").write_bytes(b"")  # a file of no shard group
    ds = TFRecordDataset(two_splits, features=dict(DESCRIPTION))
    assert [os.path.basename(p) for p in ds.paths] == ["notes.tfrecord"] + [f"train-{s:05d}-of-00004" for s in range(4)]
    assert [int(item["image/class/label"]) for item in ds] == _tf_reads(str(two_splits / "*.tfrecord")) \
        + _tf_reads(str(two_splits / "train-*"))


def test_len_of_a_tf_teams_gzip_shards_says_how_to_count_them(tmp_path):
    """GZIP shards from tf.io.TFRecordWriter: len() cannot know their count
    and names the command that counts them; that command, run as written,
    and reading decompressed copies both give TensorFlow's count."""
    records = [[tf.train.Example(features=tf.train.Features(feature={"id": tf.train.Feature(
        int64_list=tf.train.Int64List(value=[10 * s + i]))})).SerializeToString() for i in range(4 + 3 * s)]
        for s in range(2)]
    paths = []
    for s, shard in enumerate(records):
        paths.append(str(tmp_path / f"train-{s:05d}-of-00002.tfrecord.gz"))
        with tf.io.TFRecordWriter(paths[-1], options=tf.io.TFRecordOptions("GZIP")) as w:
            for r in shard:
                w.write(r)
    theirs = sum(1 for _ in tf.data.TFRecordDataset(paths, compression_type="GZIP"))
    ds = TFRecordDataset(str(tmp_path / "train-*.tfrecord.gz"))
    with pytest.raises(TypeError, match=r"^len\(\) is unknown: 2 of 2 shards are compressed") as err:
        len(ds)
    command = str(err.value).split("`")[1]
    assert command == f"tfrecord-torch verify {paths[0]} {paths[1]}"
    exe = os.path.join(os.path.dirname(sys.executable), "tfrecord-torch")
    done = subprocess.run([exe, *command.split()[1:]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sum(int(line.split(": ")[1].split()[0]) for line in done.stdout.splitlines()) == theirs == 11
    assert "tfrecord-torch decompress IN OUT" in str(err.value)
    for path in paths:
        subprocess.run([exe, "decompress", path, path.removesuffix(".gz")], check=True, capture_output=True)
    assert len(TFRecordDataset(str(tmp_path / "train-*.tfrecord"))) == theirs
