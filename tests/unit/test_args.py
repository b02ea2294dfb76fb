"""tfrecord_torch/_args.py: the argument checks every constructor shares, and
the option objects and constructors that use them giving one error for one
mistake (a bool is never a count)."""

import pytest

from tfrecord_torch import (
    Batching,
    ImageBatching,
    ShardedWriter,
    Sharding,
    Shuffling,
    Source,
    TFRecordDataset,
    write_dataset,
)
from tfrecord_torch._args import check_choice, check_flag, check_instance, check_int, refuse_moved


def test_check_int_accepts_ints_in_range():
    assert check_int("n", 3, minimum=1) == 3
    assert check_int("n", 0) == 0
    assert check_int("n", None, optional=True) is None
    assert check_int("q", 100, minimum=1, maximum=100) == 100


@pytest.mark.parametrize("value", [True, False, 1.0, "2", None, -1])
def test_check_int_refuses_bools_floats_strings_and_negatives(value):
    with pytest.raises(ValueError, match=r"^n must be an int >= 0, got "):
        check_int("n", value)


def test_check_int_messages_name_the_range():
    with pytest.raises(ValueError, match=r"n must be a positive int or None, got 0"):
        check_int("n", 0, minimum=1, optional=True)
    with pytest.raises(ValueError, match=r"q must be an int in \[1, 100\], got 101"):
        check_int("q", 101, minimum=1, maximum=100)


def test_check_flag_choice_and_instance():
    assert check_flag("f", False) is False and check_flag("f", None, optional=True) is None
    with pytest.raises(ValueError, match="f must be True or False, got 1"):
        check_flag("f", 1)
    assert check_choice("even", "pad", (None, "pad", "drop")) == "pad"
    with pytest.raises(ValueError, match=r"even must be one of \(None, 'pad', 'drop'\), got 'x'"):
        check_choice("even", "x", (None, "pad", "drop"))
    with pytest.raises(ValueError, match="must be one of"):
        check_choice("even", 0, (None, False))  # 0 == False, but it is not False
    with pytest.raises(TypeError, match="source must be a Source, got dict"):
        check_instance("source", {}, Source, "a Source")


def test_refuse_moved_names_the_new_spelling():
    moved = {"shuffle_block": ("shuffle", "Shuffling(block={value!r})")}
    with pytest.raises(TypeError, match=r"f\(\): shuffle_block= moved: use shuffle=Shuffling\(block=64\)"):
        refuse_moved("f", {"shuffle_block": 64}, moved)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        refuse_moved("f", {"nope": 1}, moved)
    refuse_moved("f", {}, moved)


@pytest.mark.parametrize("make, name", [
    (lambda p: TFRecordDataset(p, batch_size=True), "batch_size"),
    (lambda p: Shuffling(block=True), "Shuffling.block"),
    (lambda p: Shuffling(buffer=True), "Shuffling.buffer"),
    (lambda p: Shuffling(cycle_length=True), "Shuffling.cycle_length"),
    (lambda p: Sharding(rank=False, world_size=1), "Sharding.rank"),
    (lambda p: Sharding(rank=0, world_size=True), "Sharding.world_size"),
    (lambda p: Source(lengths=[True]), "Source.lengths"),
    (lambda p: ShardedWriter(p / "out", name="x", max_records=True), "max_records"),
    (lambda p: ShardedWriter(p / "out", name="x", max_bytes=True), "max_bytes"),
    (lambda p: ImageBatching(threads=True), "threads"),
])
def test_a_bool_is_never_a_count(tmp_path, make, name):
    with pytest.raises(ValueError, match=rf"^{name}(\[\.\.\.\])? must be (a positive int|an int >= 0).*got (True|False)"):
        make(tmp_path)


def test_write_dataset_refuses_bool_counts(tmp_path):
    from tfrecord_torch import Execution, ShardLayout
    with pytest.raises(ValueError, match=r"^ShardLayout.size must be a positive int, got True"):
        ShardLayout(size=True)
    with pytest.raises(ValueError, match=r"^Execution.retries must be an int >= 0, got True"):
        Execution(retries=True)
    with pytest.raises(ValueError, match=r"^Execution.num_workers must be an int >= 0 or None, got False"):
        Execution(num_workers=False)


@pytest.mark.parametrize("old, new", [
    ({"shuffle_block": 64}, r"use shuffle=Shuffling\(block=64\)"),
    ({"cycle_length": 8}, r"use shuffle=Shuffling\(cycle_length=8\)"),
    ({"rank": 0}, r"use sharding=Sharding\(rank=0, world_size=...\)"),
    ({"even": "pad"}, r"use sharding=Sharding\(even='pad'\)"),
    ({"index": False}, r"use source=Source\(index=False\)"),
    ({"drop_last": True}, r"use batching=Batching\(drop_last=True\)"),
    ({"images": False}, r"use batching=Batching\(images=False\)"),
])
def test_old_dataset_keywords_name_the_new_spelling(tmp_path, old, new):
    with pytest.raises(TypeError, match=rf"TFRecordDataset\(\): \w+= moved: {new}"):
        TFRecordDataset(tmp_path, **old)


def test_old_write_dataset_keywords_name_the_new_spelling(tmp_path):
    with pytest.raises(TypeError, match=r"write_dataset\(\): shard_size= moved: use shards=ShardLayout\(size=10\)"):
        write_dataset([], tmp_path, name="x", shard_size=10)
    with pytest.raises(TypeError, match=r"num_workers= moved: use execution=Execution\(num_workers=0\)"):
        write_dataset([], tmp_path, name="x", num_workers=0)


def test_option_objects_are_frozen_values():
    assert Shuffling(block=4) == Shuffling(block=4) and Source(index=["a"]).index == ("a",)
    assert Batching().image_options == ImageBatching() and Batching(images=False).image_options is None
    with pytest.raises(AttributeError):
        Shuffling().block = 2  # type: ignore[misc]
    with pytest.raises(ValueError, match="cannot go with index=False"):
        Source(lengths=[1], index=False)
    with pytest.raises(ValueError, match="images must be True, False or an ImageBatching"):
        Batching(images="yes")  # type: ignore[arg-type]
