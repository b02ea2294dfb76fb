"""Global shuffle, a new epoch every iteration (persistent workers too), safe resume states."""

import numpy as np
import pytest
from helpers import ids_of, write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import Int64, Sharding, Shuffling, TFRecordDataset
from tfrecord_torch.data.plan import RangePlanner, global_order, read_groups
from tfrecord_torch.data.reading import interleave


@pytest.mark.parametrize("block", [1, 3, 8])
@pytest.mark.parametrize("total", [0, 1, 7, 100, 1001])
def test_global_order_is_a_permutation(total, block):
    order = global_order(total, seed=1, epoch=2, block=block, window=4)
    assert sorted(order.tolist()) == list(range(total))
    assert (order == global_order(total, seed=1, epoch=2, block=block, window=4)).all()
    if total > 50:
        assert (order != global_order(total, seed=1, epoch=3, block=block, window=4)).any()


def test_block_shuffle_keeps_blocks_in_one_window():
    order = global_order(64, seed=0, epoch=0, block=4, window=2)
    for w in range(0, 64, 8):  # each window of 2 blocks holds 2 whole aligned blocks
        blocks = {int(i) // 4 for i in order[w:w + 8]}
        assert len(blocks) == 2


def test_read_groups_are_aligned():
    assert read_groups(5, 23, 8) == [(5, 8), (8, 16), (16, 23)]
    assert read_groups(0, 0, 8) == []


def test_planner_mixes_shards():
    shards, records = RangePlanner([50, 50], shuffle=True, seed=0, epoch=0).pairs(0, 20)
    assert set(shards.tolist()) == {0, 1}
    assert len(set(zip(shards.tolist(), records.tolist()))) == 20


def _mean_distinct(labels, batch):
    n = len(labels) // batch * batch
    return np.mean([len(set(row)) for row in np.asarray(labels[:n]).reshape(-1, batch)])


def test_global_shuffle_mixes_class_sorted_shards(tmp_path):
    # 4 shards, classes sorted (as a converted torchvision dataset): label = id // 20
    write_shards(tmp_path, [100, 100, 100, 100])
    ds = TFRecordDataset(tmp_path, shuffle=True, seed=0, features={"id": Int64()})
    labels = [i // 20 for i in ids_of(ds)]
    rng = np.random.default_rng(0)
    true = np.mean([_mean_distinct(rng.permutation(400) // 20, 16) for _ in range(20)])
    assert _mean_distinct(labels, 16) >= 0.9 * true
    assert _mean_distinct([i // 20 for i in range(400)], 16) < 0.2 * true  # what unshuffled gives


@pytest.mark.parametrize("batch_size", [None, pytest.param(5, marks=pytest.mark.slow)])  # 5: in batches
def test_new_epoch_each_iteration_same_with_persistent_workers(tmp_path, batch_size):
    write_shards(tmp_path, [17, 9, 12])

    def make():
        return TFRecordDataset(tmp_path, shuffle=True, seed=4, batch_size=batch_size)

    def loader(ds, persistent):
        return DataLoader(ds, num_workers=2, batch_size=None, persistent_workers=persistent)

    expected = []
    for epoch in range(3):
        ds = make()
        ds.set_epoch(epoch)
        expected.append(ids_of(loader(ds, False)))
    assert len({tuple(e) for e in expected}) == 3
    for persistent in (False, True):
        dl = loader(make(), persistent)
        assert [ids_of(dl) for _ in range(3)] == expected
    single = make()  # without workers, too
    got = [ids_of(DataLoader(single, batch_size=None)) for _ in range(3)]
    for epoch, order in enumerate(got):
        ds = make()
        ds.set_epoch(epoch)
        assert order == ids_of(ds)


def test_set_epoch_reaches_persistent_workers(tmp_path):
    write_shards(tmp_path, [20, 20])
    ds = TFRecordDataset(tmp_path, shuffle=True, seed=1)
    dl = DataLoader(ds, num_workers=2, batch_size=None, persistent_workers=True)
    ds.set_epoch(5)
    first = ids_of(dl)
    ds.set_epoch(5)
    assert ids_of(dl) == first
    fresh = TFRecordDataset(tmp_path, shuffle=True, seed=1)
    fresh.set_epoch(5)
    assert ids_of(DataLoader(fresh, num_workers=2, batch_size=None)) == first


def test_interleave_round_robin_and_refill():
    sources = [lambda n=n, k=k: iter([f"{n}{i}" for i in range(k)]) for n, k in zip("abc", (3, 1, 2))]
    assert list(interleave(sources, 2)) == ["a0", "b0", "a1", "c0", "a2", "c1"]
    assert list(interleave([], 3)) == []


def test_streamed_shards_interleave(tmp_path):
    write_shards(tmp_path, [30, 30, 30, 30], compression="gzip")
    ds = TFRecordDataset(tmp_path, shuffle=Shuffling(buffer=0, cycle_length=4))
    got = ids_of(ds)
    assert sorted(got) == list(range(120))
    assert {g // 30 for g in got[:4]} == {0, 1, 2, 3}


@pytest.mark.parametrize("change, named", [
    ({"seed": 8}, "seed"), ({"sharding": Sharding(rank=1, world_size=2, even="pad")}, "even='pad'"),
    ({"shuffle": False}, "shuffle"), ({"shuffle": Shuffling(block=4)}, "shuffle"),
])
def test_load_state_refuses_other_settings(tmp_path, change, named):
    write_shards(tmp_path, [10, 10])
    kw = dict(shuffle=True, seed=7, sharding=Sharding(rank=0, world_size=1))
    ds = TFRecordDataset(tmp_path, **kw)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    assert state["format"] == 1 and state["shards"][0][1] == 10
    with pytest.raises(ValueError, match=named):
        TFRecordDataset(tmp_path, **{**kw, **change}).load_state_dict(state)


def test_load_state_refuses_other_shards_and_old_formats(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write_shards(a, [10, 10])
    write_shards(b, [10, 11])
    state = TFRecordDataset(a).state_dict()
    with pytest.raises(ValueError, match=r"shards\[1\].*10.*11"):
        TFRecordDataset(b).load_state_dict(state)
    with pytest.raises(ValueError, match="format"):
        TFRecordDataset(a).load_state_dict({"epoch": 0, "position": 3, "seed": 0})
    TFRecordDataset(a).load_state_dict(state)  # the same shards in another folder are fine


def test_resume_restores_the_epoch_mid_run(tmp_path):
    write_shards(tmp_path, [12, 7])
    ds = TFRecordDataset(tmp_path, shuffle=True, seed=2, batch_size=3)
    runs = [ids_of(ds) for _ in range(3)]  # epochs 0, 1, 2
    again = TFRecordDataset(tmp_path, shuffle=True, seed=2, batch_size=3)
    ids_of(again)
    ids_of(again)
    it = iter(again)  # epoch 2
    head = ids_of([next(it) for _ in range(2)])
    state = again.state_dict()
    assert state["epoch"] == 2
    fresh = TFRecordDataset(tmp_path, shuffle=True, seed=2, batch_size=3)
    fresh.load_state_dict(state)
    assert head + ids_of(fresh) == runs[2]
