"""Planned conversion: the write order, frozen shard specs, any executor giving
the same bytes, retries, and reruns that write only what is missing."""

import concurrent.futures as cf
import multiprocessing
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from helpers import assert_same_files, listing

from tfrecord_torch import (
    DatasetSource,
    Execution,
    ShardLayout,
    parse_example,
    read_records,
    tfds_dataset,
    write_dataset,
    write_order,
)
from tfrecord_torch.write.plan import plan_conversion, shard_bounds
from tfrecord_torch.write.source import source_of
from tfrecord_torch.write.task import ShardTask, marker_path


def fake(n=24, classes=4):
    return torchvision.datasets.FakeData(size=n, image_size=(3, 6, 5), num_classes=classes, random_offset=7)



def test_write_order_is_a_seeded_permutation_fixed_forever():
    order = write_order(1000, seed=5)
    assert sorted(order.tolist()) == list(range(1000)) and not order.flags.writeable
    assert np.array_equal(order, write_order(1000, seed=5))
    assert not np.array_equal(order, write_order(1000, seed=6))
    assert write_order(6, shuffle=False).tolist() == list(range(6))
    # pinned: the order must not change between releases or numpy versions (it decides the bytes)
    assert write_order(10, seed=0).tolist() == [1, 4, 5, 7, 6, 9, 0, 3, 2, 8]
    assert write_order(0).tolist() == []
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="length must be"):
            write_order(bad)
    with pytest.raises(ValueError, match="seed must be"):
        write_order(3, seed=-1)


def test_plan_tiles_the_order_with_frozen_picklable_specs(tmp_path):
    plan = plan_conversion(10, tmp_path / "rel", name="d", split="train", num_shards=4, seed=3)
    assert [(s.start, s.stop) for s in plan.shards] == shard_bounds(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert [os.path.basename(s.path) for s in plan.shards] == [f"d-train.tfrecord-0000{i}-of-00004" for i in range(4)]
    assert os.path.isabs(plan.shards[0].path)
    assert np.array_equal(np.concatenate([plan.sources(s) for s in plan.shards]), write_order(10, seed=3))
    assert pickle.loads(pickle.dumps(plan)) == plan
    with pytest.raises(AttributeError):
        plan.shards[0].start = 1  # frozen
    remote = plan_conversion(0, "s3://b/p/", name="d", split="test", num_shards=1)
    assert remote.shards[0].path == "s3://b/p/d-test.tfrecord-00000-of-00001" and remote.shards[0].records == 0
    with pytest.raises(ValueError, match=r"num_shards must be an int in \[1, 10\]"):
        plan_conversion(10, tmp_path, name="d", split="train", num_shards=11)
    with pytest.raises(ValueError, match="split must be letters"):
        plan_conversion(10, tmp_path, name="d", split="../x", num_shards=1)


def shard_labels(folder, name, n=4):
    return [[int(parse_example(r)["label"][0]) for r in read_records(folder / f"{name}-train.tfrecord-0000{i}-of-0000{n}")]
            for i in range(n)]


def test_shuffled_by_default_so_every_shard_mixes_classes(tmp_path):
    class Sorted(torch.utils.data.Dataset):  # class-sorted, as ImageFolder and many sources are
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return np.full((2, 2, 1), i, np.uint8), i // 16

    write_dataset(Sorted(), tmp_path / "mixed", name="s", shards=ShardLayout(count=4),
                  execution=Execution(progress=False))
    write_dataset(Sorted(), tmp_path / "kept", name="s", shuffle=False, shards=ShardLayout(count=4),
                  execution=Execution(progress=False))
    mixed, kept = (shard_labels(tmp_path / folder, "s") for folder in ("mixed", "kept"))
    assert kept == [[c] * 16 for c in range(4)]
    assert all(len(set(labels)) >= 3 for labels in mixed)
    assert sorted(sum(mixed, [])) == sorted(sum(kept, []))
    assert sum(mixed, []) == [int(i) // 16 for i in write_order(64)]


def test_byte_identical_serially_with_processes_and_any_executor(tmp_path):
    source = fake()
    write_dataset(source, tmp_path / "serial", name="f", seed=9, shards=ShardLayout(count=4),
                  execution=Execution(num_workers=0, progress=False))
    write_dataset(source, tmp_path / "pool", name="f", seed=9, shards=ShardLayout(count=4),
                  execution=Execution(num_workers=2, progress=False))
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as ex:
        write_dataset(source, tmp_path / "executor", name="f", seed=9, shards=ShardLayout(count=4),
                      execution=Execution(executor=ex, progress=False))
    with cf.ThreadPoolExecutor(1) as ex:  # one thread: FakeData seeds torch's global generator, not thread-safe
        write_dataset(DatasetSource(torchvision.datasets.FakeData, size=24, image_size=(3, 6, 5), num_classes=4,
                                    random_offset=7), tmp_path / "threads", name="f", seed=9,
                                    shards=ShardLayout(count=4), execution=Execution(executor=ex, progress=False))
    assert len([n for n in listing(tmp_path / "serial") if n.endswith(".index")]) == 4
    for other in ("pool", "executor", "threads"):
        assert_same_files(tmp_path / "serial", tmp_path / other)
    assert len(tfds_dataset(tmp_path / "executor", "train")) == 24


def test_torchvision_datasets_travel_as_class_and_arguments(tmp_path):
    source = fake()
    recipe = source_of(source)
    assert recipe.factory is torchvision.datasets.FakeData and recipe.kwargs["random_offset"] == 7
    rebuilt = pickle.loads(pickle.dumps(recipe)).build()
    assert len(pickle.dumps(recipe)) < 1000 and np.array_equal(np.asarray(rebuilt[5][0]), np.asarray(source[5][0]))
    folder = torchvision.datasets.ImageFolder
    os.makedirs(tmp_path / "img" / "a")
    from PIL import Image

    Image.fromarray(np.zeros((3, 3, 3), np.uint8)).save(tmp_path / "img" / "a" / "x.png")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        recipe = source_of(folder("img"))
    finally:
        os.chdir(cwd)
    assert recipe.kwargs["root"] == str(tmp_path / "img")  # absolute: tasks may run in another folder
    assert recipe.build().samples == [(str(tmp_path / "img" / "a" / "x.png"), 0)]


class Local(torch.utils.data.Dataset):
    def __init__(self):
        self.fn = lambda i: i  # cannot be pickled

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return np.zeros((2, 2, 3), np.uint8), self.fn(i) % 2


def test_an_unpicklable_source_with_an_executor_says_what_to_do(tmp_path):
    with cf.ThreadPoolExecutor(1) as ex, pytest.raises(ValueError, match="cannot be pickled.*DatasetSource"):
        write_dataset(Local(), tmp_path, name="l", execution=Execution(executor=ex, progress=False))
    write_dataset(Local(), tmp_path, name="l", execution=Execution(num_workers=2, progress=False),
                  shards=ShardLayout(count=2))  # forked: not pickled
    assert len(tfds_dataset(tmp_path, "train")) == 4


def test_a_recipe_that_rebuilds_another_dataset_is_refused(tmp_path):
    wrong = DatasetSource(torchvision.datasets.FakeData, size=5, image_size=(3, 4, 4))
    task_source = fake(n=6)
    with cf.ThreadPoolExecutor(1) as ex, pytest.raises(ValueError, match="has 5 samples where the plan has 6"):
        from tfrecord_torch.write import convert

        original = convert.source_of
        convert.source_of = lambda d: wrong
        try:
            write_dataset(task_source, tmp_path, name="w", execution=Execution(executor=ex, progress=False))
        finally:
            convert.source_of = original
    assert listing(tmp_path) == []


class Flaky(torch.utils.data.Dataset):
    """Raises OSError at sample ``bad`` while ``fails`` is positive (a file, so forked workers share it)."""

    def __init__(self, counter, bad=5, n=20):
        self.counter, self.bad, self.n = str(counter), bad, n
        self.calls = 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls += 1
        if i == self.bad and os.path.exists(self.counter):
            left = int(Path(self.counter).read_text())
            if left > 0:
                with open(self.counter, "w") as f:
                    f.write(str(left - 1))
                raise OSError(f"injected failure at sample {i}")
        return np.full((3, 3, 3), i, np.uint8), i % 3


def test_a_task_that_raises_once_is_retried(tmp_path, caplog):
    counter = tmp_path / "fails"
    counter.write_text("1")
    write_dataset(Flaky(counter), tmp_path / "out", name="k", shards=ShardLayout(count=4),
                  execution=Execution(progress=False))
    assert counter.read_text() == "0" and "retrying" in caplog.text
    write_dataset(Flaky(tmp_path / "none"), tmp_path / "ref", name="k", shards=ShardLayout(count=4),
                  execution=Execution(progress=False))
    assert_same_files(tmp_path / "out", tmp_path / "ref")
    assert not [f for f in os.listdir(tmp_path / "out") if f.endswith(".partial")]


def test_rerun_after_a_failure_writes_only_the_missing_shards(tmp_path):
    counter = tmp_path / "fails"
    counter.write_text("5")
    with pytest.raises(OSError, match="injected failure at sample 5"):
        write_dataset(Flaky(counter), tmp_path / "out", name="k", shards=ShardLayout(count=4),
                      execution=Execution(retries=1, progress=False))
    out = tmp_path / "out"
    assert "dataset_info.json" not in listing(out)  # not committed
    bad_shard = int(np.where(write_order(20) == 5)[0][0]) // 5
    kept = [n for n in listing(out) if not n.endswith(".index")]
    assert f"k-train.tfrecord-0000{bad_shard}-of-00004" not in kept  # no final-named partial shard
    inodes = {n: os.stat(out / n).st_ino for n in kept}
    counter.write_text("0")
    again = Flaky(counter)
    write_dataset(again, out, name="k", shards=ShardLayout(count=4), execution=Execution(progress=False))
    assert again.calls == 5 * (4 - len(kept))  # only the missing shards were written
    assert {n: os.stat(out / n).st_ino for n in kept} == inodes
    write_dataset(Flaky(tmp_path / "none"), tmp_path / "ref", name="k", shards=ShardLayout(count=4),
                  execution=Execution(progress=False))
    assert_same_files(out, tmp_path / "ref")
    # a rerun of another plan (another seed) rewrites everything and drops what no longer belongs
    write_dataset(Flaky(tmp_path / "none"), out, name="k", seed=1, shards=ShardLayout(count=2),
                  execution=Execution(progress=False))
    assert [n for n in listing(out) if ".tfrecord-" in n] == \
        [f"index/k-train.tfrecord-0000{i}-of-00002.index" for i in range(2)] + \
        [f"k-train.tfrecord-0000{i}-of-00002" for i in range(2)]
    assert not os.path.exists(out / ".shard_markers")  # a finished conversion leaves no markers
    labels = [int(d["label"]) for d in tfds_dataset(out, "train")]
    assert labels == [int(i) % 3 for i in write_order(20, seed=1)]


def test_bad_samples_fail_at_once_without_retries(tmp_path):
    class Bad(torch.utils.data.Dataset):
        calls = 0

        def __len__(self):
            return 3

        def __getitem__(self, i):
            Bad.calls += 1
            return "not an image", 0

    with pytest.raises(TypeError, match="sample [0-2]: cannot convert an image of type str"):
        write_dataset(Bad(), tmp_path, name="b", execution=Execution(progress=False))
    assert Bad.calls == 1


def test_max_shard_bytes_sets_the_shard_count_from_encoded_sizes(tmp_path):
    class Noise(torch.utils.data.Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            return np.random.default_rng(i).integers(0, 256, (16, 16, 3), dtype=np.uint8), 0

    paths = write_dataset(Noise(), tmp_path, name="n", shards=ShardLayout(max_bytes=4000),
                          execution=Execution(progress=False))
    sizes = [os.path.getsize(p) for p in paths]
    assert len(paths) >= 8 and max(sizes) < 5000  # PNG of noise: about 800 bytes a record
    assert sum(len(list(read_records(p))) for p in paths) == 40


def test_shard_tasks_pickle_small(tmp_path):
    plan = plan_conversion(10 ** 6, tmp_path, name="d", split="train", num_shards=1000)
    task = ShardTask(spec=plan.shards[7], length=10 ** 6, seed=0, shuffle=True, compression=None,
                     options={"format": "png", "quality": 95, "class_names": None}, fingerprint="f" * 64,
                     files_digest=None, source=source_of(fake()))
    assert len(pickle.dumps(task)) < 2000  # no order, no samples: a spec and a recipe
    assert marker_path(plan.shards[7].path) == str(tmp_path / ".shard_markers" / "d-train.tfrecord-00007-of-01000.done")
