import itertools
import os

import numpy as np
import pytest
import torch
from helpers import ids_of, write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import (
    CorruptRecordError,
    FeatureError,
    Float,
    Int64,
    Sharding,
    Shuffling,
    Source,
    TFRecordDataset,
    read_records,
)
from tfrecord_torch.data.buffers import RAMP_FIRST, shuffle_buffer

SHARDS = {"several": [5, 0, 9, 3], "single": [17], "with_empty": [0, 4, 0], "all_empty": [0, 0]}


def run(ds, workers):
    """Every id one rank's DataLoader delivers, in order."""
    return ids_of(DataLoader(ds, num_workers=workers, batch_size=None))


# every layout in the fast set under no workers and ranks, more workers than ranks and more ranks
# than workers; the whole grid is slow
CORNER = {(0, 1), (3, 2), (2, 3)}  # (workers, world)


@pytest.mark.parametrize("layout", SHARDS.values(), ids=SHARDS.keys())
@pytest.mark.parametrize("workers, world", [
    pytest.param(workers, world, id=f"{world}-{workers}",
                 marks=() if (workers, world) in CORNER else pytest.mark.slow)
    for world in (1, 2, 3) for workers in (0, 1, 2, 3)])
def test_exactly_once_grid(tmp_path, layout, workers, world):
    write_shards(tmp_path, layout)
    total = sum(layout)
    seen = []
    for rank in range(world):
        ds = TFRecordDataset(tmp_path, shuffle=True, seed=1, sharding=Sharding(rank=rank, world_size=world))
        got = run(ds, workers)
        assert len(got) == len(ds)
        seen.extend(got)
    assert sorted(seen) == list(range(total))


@pytest.mark.parametrize("workers", [0, 2, 3])
@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.filterwarnings("ignore:TFRecordDataset. DataLoader worker .* reads nothing:RuntimeWarning")  # 6 readers, 5 shards
def test_exactly_once_compressed_shards(tmp_path, workers, world):
    write_shards(tmp_path, [4, 0, 6, 2, 7], compression="gzip")
    seen = []
    for rank in range(world):
        ds = TFRecordDataset(tmp_path, shuffle=True, sharding=Sharding(rank=rank, world_size=world))
        assert ds.streamed
        with pytest.raises(TypeError, match="compressed"):
            len(ds)
        seen.extend(run(ds, workers))
    assert sorted(seen) == list(range(19))


# fast: no workers on one rank and 3 workers on each of 3 ranks; the rest of the grid is slow
@pytest.mark.parametrize("shuffle, world, workers", [
    pytest.param(shuffle, world, workers, id=f"{shuffle}-{world}-{workers}",
                 marks=() if (world, workers) in {(1, 0), (3, 3)} else pytest.mark.slow)
    for shuffle in (False, True) for world in (1, 3) for workers in (0, 2, 3)])
def test_batch_mode_exactly_once_and_worker_independent_order(tmp_path, workers, world, shuffle):
    write_shards(tmp_path, [50, 0, 33, 7])
    runs = {}
    for w in (0, workers):
        seen = []
        for rank in range(world):
            ds = TFRecordDataset(tmp_path, batch_size=8, shuffle=shuffle,
                                 sharding=Sharding(rank=rank, world_size=world),
                                 features={"id": Int64(), "x": Float(shape=(3,))})
            batches = list(DataLoader(ds, batch_size=None, num_workers=w))
            assert len(batches) == len(ds)
            assert all(b["id"].shape[0] <= 8 and b["x"].shape == (b["id"].shape[0], 3) for b in batches)
            seen.extend(ids_of(batches))
        runs[w] = seen
        assert sorted(seen) == list(range(90))
    assert runs[0] == runs[workers]


@pytest.mark.parametrize("even", ["pad", "drop"])
@pytest.mark.parametrize("workers", [0, 2])
def test_even_ranks(tmp_path, even, workers):
    write_shards(tmp_path, [7, 3])
    counts = []
    seen = set()
    for rank in range(3):
        ds = TFRecordDataset(tmp_path, shuffle=True, sharding=Sharding(rank=rank, world_size=3, even=even))
        got = run(ds, workers)
        counts.append(len(got))
        assert len(got) == len(ds)
        seen.update(got)
    assert len(set(counts)) == 1
    assert counts[0] == (4 if even == "pad" else 3)
    assert len(seen) == (10 if even == "pad" else 9)


def test_shuffle_determinism(tmp_path):
    write_shards(tmp_path, [30, 30, 30])

    def order(seed, epoch):
        ds = TFRecordDataset(tmp_path, shuffle=True, seed=seed)
        ds.set_epoch(epoch)
        return ids_of(ds)

    assert order(0, 0) == order(0, 0)
    assert order(0, 0) != order(0, 1)
    assert order(0, 0) != order(1, 0)
    assert sorted(order(0, 3)) == list(range(90))
    plain = TFRecordDataset(tmp_path)
    assert ids_of(plain) == list(range(90))


def test_shuffle_buffer_mixes_across_shards(tmp_path):
    write_shards(tmp_path, [20, 20])
    ds = TFRecordDataset(tmp_path, shuffle=Shuffling(buffer=40))
    got = ids_of(ds)
    assert sorted(got) == list(range(40))
    assert {g < 20 for g in got[:10]} == {True, False}


def test_a_shuffled_stream_gives_its_first_items_before_its_buffer_is_full(tmp_path):
    """Streamed shards shuffled with the default 10,000-record buffer: the first
    items come after a few hundred records, not after 10,000 (tf.data's wait).
    The record at 2,000 is corrupt, so a read that first filled the buffer
    raises at the first item; the epoch still raises there, as it must."""
    [path] = write_shards(tmp_path, [3000])
    data = bytearray(path.read_bytes())
    offset = sum(12 + len(r) + 4 for r in itertools.islice(read_records(str(path)), 2000))
    data[offset + 12] ^= 0xFF  # the record's first payload byte: its CRC fails
    path.write_bytes(bytes(data))
    ds = TFRecordDataset(tmp_path, features={"id": Int64()}, shuffle=True, source=Source(index=False))
    assert ds.streamed and ds.shuffle_buffer == 10_000
    items = iter(ds)
    first = [int(next(items)["id"]) for _ in range(64)]
    assert len(set(first)) == 64 and max(first) < 300
    with pytest.raises(CorruptRecordError):
        list(items)


def test_the_shuffle_buffer_grows_to_its_size_and_then_is_tf_datas():
    seen = []

    def items(n):
        for i in range(n):
            seen.append(i)
            yield i

    out = shuffle_buffer(items(5000), 1000, np.random.default_rng(0))
    first = next(out)
    assert len(seen) == RAMP_FIRST + 2 and first < len(seen)
    rest = [first, *out]
    assert sorted(rest) == list(range(5000))
    assert list(shuffle_buffer(range(5000), 1000, np.random.default_rng(0))) == rest  # the seed fixes the order
    seen.clear()
    taken = shuffle_buffer(items(5000), 1000, np.random.default_rng(1))
    held = []
    for _ in range(3000):
        next(taken)
        held.append(len(seen) - len(held) - 1)  # items in the buffer after this one left
    assert held[0] == RAMP_FIRST + 1 and held == sorted(held)  # it grows ...
    assert held.index(1000) == 1000 - RAMP_FIRST - 1 and set(held[1000 - RAMP_FIRST - 1:]) == {1000}  # ... to its size


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_size", [None, 4])
@pytest.mark.parametrize("compressed", [False, True])
def test_resume_with_stateful_dataloader(tmp_path, workers, batch_size, compressed):
    from torchdata.stateful_dataloader import StatefulDataLoader

    write_shards(tmp_path, [13, 9, 11], compression="gzip" if compressed else None)

    def make():
        ds = TFRecordDataset(tmp_path, shuffle=True, seed=7, batch_size=batch_size)
        ds.set_epoch(2)
        return ds

    kw = dict(num_workers=workers, batch_size=None if batch_size else 3)
    full = ids_of(StatefulDataLoader(make(), **kw))
    loader = StatefulDataLoader(make(), **kw)
    it = iter(loader)
    head = ids_of([next(it) for _ in range(4)])
    state = loader.state_dict()
    del it, loader
    resumed = StatefulDataLoader(make(), **kw)
    resumed.load_state_dict(state)
    rest = ids_of(resumed)
    assert head + rest == full
    assert sorted(full) == list(range(33))


def test_resume_without_workers(tmp_path):
    write_shards(tmp_path, [10, 10])
    ds = TFRecordDataset(tmp_path, shuffle=True, seed=3)
    ds.set_epoch(1)
    full = ids_of(ds)
    ds.set_epoch(1)  # (the next iteration would read epoch 2)
    it = iter(ds)
    head = ids_of([next(it) for _ in range(7)])
    state = ds.state_dict()
    fresh = TFRecordDataset(tmp_path, shuffle=True, seed=3)
    fresh.load_state_dict(state)  # restores epoch 1 itself
    assert head + ids_of(fresh) == full
    assert fresh.epoch == 1 and ids_of(fresh) != full  # then goes on with epoch 2


# batch mode under fork; spawn (the dataset pickled into fresh workers) once, slow: it is the same
# refusal in the main process, and each spawned worker costs an interpreter importing torch
@pytest.mark.parametrize("batch_size, context", [(None, "fork"), (4, "fork"),
                                                 pytest.param(None, "spawn", marks=pytest.mark.slow)])
def test_state_dict_refuses_a_position_held_by_plain_dataloader_workers(tmp_path, context, batch_size):
    """Read through a plain DataLoader with workers, the dataset in the main
    process cannot know the position: state_dict() raises and names
    StatefulDataLoader instead of returning position 0 (a replay)."""
    write_shards(tmp_path, [20, 20])
    ds = TFRecordDataset(tmp_path, shuffle=True, batch_size=batch_size)
    loader = DataLoader(ds, num_workers=2, multiprocessing_context=context,
                        batch_size=None if batch_size else 4)
    it = iter(loader)
    for _ in range(3):
        next(it)
    with pytest.raises(RuntimeError, match=r"torchdata.*StatefulDataLoader.*loader\.state_dict\(\)"):
        ds.state_dict()
    del it
    ds.set_epoch(1)  # the start of a named epoch is a position this process knows
    state = ds.state_dict()
    assert (state["epoch"], state["position"]) == (1, 0)
    ids_of(loader)
    with pytest.raises(RuntimeError, match="StatefulDataLoader"):
        ds.state_dict()
    ids_of(ds)  # read in this process again: its own position counts
    assert ds.state_dict()["position"] == len(ds)


def test_state_loaded_in_main_process_is_refused_by_workers(tmp_path):
    """A state saved and loaded without workers counts the whole epoch; where
    positions cannot be carried to another split (a block shuffle mixes each
    reader's own range), plain DataLoader workers, each reading a share,
    refuse it instead of each skipping that many of their own records."""
    write_shards(tmp_path, [20, 20])
    ds = TFRecordDataset(tmp_path, shuffle=Shuffling(block=4))
    it = iter(ds)
    for _ in range(5):
        next(it)
    state = ds.state_dict()
    fresh = TFRecordDataset(tmp_path, shuffle=Shuffling(block=4))
    fresh.load_state_dict(state)
    assert fresh.state_dict()["position"] == 5
    with pytest.raises(ValueError, match="StatefulDataLoader"):
        ids_of(DataLoader(fresh, num_workers=2, batch_size=None))


def test_features_to_tensors(tmp_path):
    write_shards(tmp_path, [5])
    ds = TFRecordDataset(tmp_path, features={"id": Int64(), "x": Float(shape=(3,))},
                         transform=lambda d: {**d, "double": d["x"] * 2})
    item = next(iter(ds))
    assert item["id"].dtype == torch.int64 and item["id"].shape == ()
    assert item["x"].dtype == torch.float32 and item["x"].shape == (3,)
    assert torch.equal(item["double"], item["x"] * 2)
    batch = next(iter(DataLoader(ds, batch_size=5)))
    assert batch["id"].tolist() == [0, 1, 2, 3, 4]


def test_missing_feature_error_names_key_and_record(tmp_path):
    paths = write_shards(tmp_path, [3], extra=lambda i: {"label": 1} if i != 2 else {})
    ds = TFRecordDataset(tmp_path, features={"label": Int64()})
    with pytest.raises(FeatureError) as info:
        list(ds)
    err = info.value
    assert err.key == "label" and err.record == 2 and err.path == str(paths[0])
    assert "required feature is missing" in str(err) and "byte offset" in str(err)
    batched = TFRecordDataset(tmp_path, features={"label": Int64()}, batch_size=3)
    with pytest.raises(FeatureError) as info:
        list(batched)
    assert info.value.record == 2
    ok = TFRecordDataset(tmp_path, features={"label": Int64(default=-1)})
    assert [int(d["label"]) for d in ok] == [1, 1, -1]


def test_defaults_batch_with_present_values(tmp_path):
    # Records 1 and 3 lack "label" and "v": the defaults must take the declared
    # shapes, so the DataLoader's collate and batch mode can stack them.
    write_shards(tmp_path, [4], extra=lambda i: {} if i % 2 else {"label": i, "v": [i, i + 0.5]})
    spec = {"label": Int64(default=-1), "v": Float(shape=(2,), default=0.0),
            "tail": Int64(shape=None, default=[7, 8])}
    (batch,) = DataLoader(TFRecordDataset(tmp_path, features=spec), batch_size=4)
    assert batch["label"].tolist() == [0, -1, 2, -1]
    assert batch["v"].tolist() == [[0, 0.5], [0, 0], [2, 2.5], [0, 0]]
    (batched,) = TFRecordDataset(tmp_path, features=spec, batch_size=4)
    assert batched["label"].tolist() == [0, -1, 2, -1] and batched["v"].shape == (4, 2)
    assert [t.tolist() for t in batched["tail"]] == [[7, 8]] * 4
    # A transform editing the default in place does not change the next record's.
    def bump(item):
        item["label"] += 100
        return item
    assert [int(d["label"]) for d in TFRecordDataset(tmp_path, features=spec, transform=bump)] \
        == [100, 99, 102, 99]
    for bad in (lambda: Float(shape=(2,), default=[1.0, 2.0, 3.0]), lambda: Int64(default="x")):
        with pytest.raises(ValueError, match="default"):
            bad()


def test_wrong_kind_and_shape(tmp_path):
    write_shards(tmp_path, [2])
    with pytest.raises(FeatureError, match="holds float values, expected int64"):
        list(TFRecordDataset(tmp_path, features={"x": Int64(shape=(3,))}))
    with pytest.raises(FeatureError, match="holds 3 values, expected 4"):
        list(TFRecordDataset(tmp_path, features={"x": Float(shape=(4,))}))


def test_corrupt_record_in_dataset_names_location(tmp_path):
    (path,) = write_shards(tmp_path, [5])
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 1
    path.write_bytes(bytes(raw))
    os.remove(str(path) + ".index") if os.path.exists(str(path) + ".index") else None
    with pytest.raises(CorruptRecordError) as info:
        TFRecordDataset(tmp_path)  # building the index checks every CRC
    assert info.value.record == 4


def test_bad_arguments(tmp_path):
    write_shards(tmp_path, [1])
    for kwargs, match in [(lambda: {"sharding": Sharding(rank=2, world_size=2)}, "rank"),
                          (lambda: {"sharding": Sharding(even="x")}, "even"),
                          (lambda: {"batch_size": 0}, "batch_size"),
                          (lambda: {"shuffle": Shuffling(buffer=-1)}, "Shuffling.buffer"),
                          (lambda: {"features": {"a": 1}}, "Feature"),
                          (lambda: {"source": Source(index=["a", "b"])}, "index")]:
        with pytest.raises(ValueError, match=match):
            TFRecordDataset(tmp_path, **kwargs())
    with pytest.raises(FileNotFoundError):
        TFRecordDataset(tmp_path / "nothing-*.tfrecord")


def test_indexes_built_for_read_shards_go_to_the_cache_not_the_folder(tmp_path, monkeypatch):
    from tfrecord_torch.records import shardindex

    data = tmp_path / "data"
    data.mkdir()
    write_shards(data, [6])
    before = sorted(os.listdir(data))
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(tmp_path / "cache"))
    assert len(TFRecordDataset(data)) == 6
    assert sorted(os.listdir(data)) == before  # nothing written beside the shard
    assert len(list((tmp_path / "cache").iterdir())) == 1

    def no_scan(*args, **kwargs):
        raise AssertionError("the cached index was not used")

    monkeypatch.setattr(shardindex, "scan_index", no_scan)
    assert len(TFRecordDataset(data)) == 6  # the cached index is found again
    assert sorted(os.listdir(data)) == before


def test_stale_index_is_rebuilt(tmp_path):
    (path,) = write_shards(tmp_path, [4])
    TFRecordDataset(tmp_path, source=Source(index="beside"))
    index_file = tmp_path / (path.name + ".index")
    assert index_file.exists()
    write_shards(tmp_path, [6])
    assert len(TFRecordDataset(tmp_path)) == 6  # without being asked, the stale index beside is not rewritten
    assert len(index_file.read_text().splitlines()) == 4
    assert len(TFRecordDataset(tmp_path, source=Source(index="beside"))) == 6
    assert len(index_file.read_text().splitlines()) == 6


def test_explicit_mismatched_index_is_refused(tmp_path):
    from tfrecord_torch import IndexMismatchError, build_index

    a, b = write_shards(tmp_path, [4, 5])
    with pytest.raises(IndexMismatchError):
        TFRecordDataset([a], source=Source(index=[build_index(b, tmp_path / "b.idx")]))


def test_len_of_streamed_shards_says_why_and_how_to_count_them(tmp_path):
    """Compressed shards are named, with the commands that count them; with
    index=False the shards are not compressed, and the message says so."""
    plain = write_shards(tmp_path, [3])
    packed = write_shards(tmp_path, [4, 5, 6, 7], compression="gzip", prefix="packed")
    with pytest.raises(TypeError, match=r"^len\(\) is unknown: 4 of 5 shards are compressed \(.*packed-00000.*, "
                                        r".*packed-00001.*, \.\.\.\).*`tfrecord-torch verify FILES`.*"
                                        r"`tfrecord-torch decompress IN OUT`"):
        len(TFRecordDataset([*plain, *packed]))
    with pytest.raises(TypeError, match=r"^len\(\) is unknown: 1 of 1 shards is compressed .*"
                                        rf"`tfrecord-torch verify {packed[0]}`"):
        len(TFRecordDataset(packed[0]))
    with pytest.raises(TypeError, match=r"^len\(\) is unknown: Source\(index=False\) streams every shard.*"
                                        r"leave index= out"):
        len(TFRecordDataset(plain, source=Source(index=False)))
    assert len(TFRecordDataset(plain)) == 3
