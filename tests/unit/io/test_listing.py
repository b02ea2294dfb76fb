"""Folders and globs as users pass them: an empty result is an error that says what was
found and how to include it, and ``**`` spans folders as it does in ``glob``."""

import os

import pytest
from helpers import write_shards

from tfrecord_torch import IndexedTFRecordDataset, TFRecordDataset
from tfrecord_torch.cli import main


@pytest.fixture()
def nested(tmp_path):
    """Shards in subfolders (train/, val/), none at the top, and a README beside them."""
    for name, counts in (("train", [3, 4]), ("val", [2])):
        (tmp_path / name).mkdir()
        write_shards(tmp_path / name, counts)
    (tmp_path / "README.txt").write_text("shards are in the subfolders")
    return tmp_path


@pytest.mark.parametrize("make", [TFRecordDataset, IndexedTFRecordDataset])
def test_a_folder_of_subfolders_is_an_error_naming_them(nested, make):
    with pytest.raises(FileNotFoundError) as info:
        make(nested)
    message = str(info.value)
    assert "not searched recursively" in message
    assert "train/" in message and "val/" in message
    assert os.path.join(str(nested), "**", "*") in message  # the glob that includes them
    assert "README.txt" in message  # what was skipped, and why


def test_the_cli_says_the_same(nested, capsys):
    assert main(["inspect", str(nested)]) == 1
    assert "train/" in capsys.readouterr().err


def test_recursive_globs_span_folders(nested):
    ds = TFRecordDataset(os.path.join(nested, "**", "*.tfrecord"))
    assert len(ds) == 9
    assert [os.path.relpath(p, nested).split(os.sep)[0] for p in ds.paths] == ["train", "train", "val"]
    assert len(TFRecordDataset(os.path.join(nested, "train", "**", "*.tfrecord"))) == 7  # zero folders deep too


def test_an_empty_folder_and_a_glob_of_folders_are_errors(tmp_path, nested):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="empty folder"):
        TFRecordDataset(empty)
    with pytest.raises(FileNotFoundError, match=r"matches only folders .*add '/\*'"):
        TFRecordDataset(os.path.join(nested, "*a*"))  # train/, val/
    with pytest.raises(FileNotFoundError, match="no files match"):
        TFRecordDataset(os.path.join(nested, "nothing-*.tfrecord"))


def test_a_folder_with_shards_and_their_index_folder(tmp_path):
    """The ``index/`` folder a writer keeps is not mistaken for data, nor reported."""
    paths = write_shards(tmp_path, [3])
    (tmp_path / "index").mkdir()
    assert TFRecordDataset(tmp_path).paths == [str(p) for p in paths]


@pytest.mark.parametrize("make", [TFRecordDataset, IndexedTFRecordDataset])
def test_a_shard_named_twice_is_an_error_not_read_once(nested, make):
    # tf.data.TFRecordDataset([a, a]) reads a's records twice; reading them once would
    # silently give another dataset, so the repeat is refused with what to do instead
    shard = sorted((nested / "train").iterdir())[0]
    with pytest.raises(ValueError, match="names .* twice; tf.data would read its records twice") as info:
        make([shard, str(shard)])
    assert "mix(" in str(info.value)
    with pytest.raises(ValueError, match="by both .*train.*and"):
        make([str(nested / "train" / "*"), shard])
    assert len(make([str(nested / "train" / "*")])) == 7
