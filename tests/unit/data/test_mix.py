"""tfrecord_torch.mix: exact weights over workers and ranks, stop rules, len(), resume."""

from collections import Counter

import numpy as np
import pytest
import torch
from helpers import write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import RecordWriter, Sharding, TFRecordDataset, make_example, mix
from tfrecord_torch.data.plan import mix_choices


def write(folder, name, n, shards=2):
    folder.mkdir(exist_ok=True)
    bounds = np.linspace(0, n, shards + 1).astype(int)
    for s in range(shards):
        with RecordWriter(folder / f"{name}-{s}.tfrecord") as w:
            for i in range(bounds[s], bounds[s + 1]):
                w.write(make_example({"src": name, "id": i}))
    return folder


def keys(items):
    return [(item["src"][0].decode(), int(item["id"][0])) for item in items]


@pytest.mark.parametrize("weights", [[1, 1], [0.7, 0.2, 0.1], [3, 0, 1]])
def test_mix_choices_hold_weights_exactly(weights):
    w = np.asarray(weights, float) / sum(weights)
    choices = mix_choices(weights, seed=0, epoch=0, reader=0)
    counts = np.zeros(len(w))
    for step in range(1, 1601):
        counts[next(choices)] += 1
        if step % 16 == 0:
            assert np.abs(counts - w * step).max() < 1
    assert counts[w == 0].sum() == 0


def _datasets(tmp_path, sizes, **kw):
    return [TFRecordDataset(write(tmp_path / name, name, n), shuffle=True, seed=1, **kw)
            for name, n in zip("abc", sizes)]


# fast: no workers on one rank and 3 workers on 2 ranks; the rest of the grid is slow
@pytest.mark.parametrize("world, workers", [
    pytest.param(world, workers, id=f"{world}-{workers}",
                 marks=() if (world, workers) in {(1, 0), (2, 3)} else pytest.mark.slow)
    for world in (1, 2) for workers in (0, 2, 3)])
def test_weights_exact_under_workers_and_ranks(tmp_path, workers, world):
    got = []
    for rank in range(world):
        sets = [TFRecordDataset(write(tmp_path / n, n, 400), shuffle=True,
                                sharding=Sharding(rank=rank, world_size=world))
                for n in "ab"]
        ds = mix(sets, weights=[0.75, 0.25], seed=3, stop_on_first_exhausted=True)
        got += keys(DataLoader(ds, num_workers=workers, batch_size=None))
    counts = Counter(src for src, _ in got)
    readers = world * max(workers, 1)
    assert abs(counts["a"] - 3 * counts["b"]) <= 4 * readers  # exact within a block per reader
    assert counts["a"] >= 400 - 16 * readers  # ran until a (the heavy one) ran out
    assert len(set(got)) == len(got)


def test_cycling_oversamples_until_every_dataset_is_read(tmp_path):
    a, b = _datasets(tmp_path, [10, 60])
    ds = mix([a, b], weights=[0.5, 0.5], seed=0)
    n = len(ds)  # of the next iteration's epoch
    got = keys(ds)
    assert len(got) == n
    assert {i for s, i in got if s == "b"} == set(range(60))
    assert sum(s == "a" for s, _ in got) >= 55  # a restarted (its next epochs) to keep 50/50
    n = len(ds)
    assert len(keys(ds)) == n  # the next epoch


def test_stop_on_first_exhausted_and_len(tmp_path):
    a, b = _datasets(tmp_path, [10, 60])
    ds = mix([a, b], weights=[0.5, 0.5], seed=0, stop_on_first_exhausted=True)
    n = len(ds)
    got = keys(ds)
    assert len(got) == n
    assert sum(s == "a" for s, _ in got) == 10 and 8 <= sum(s == "b" for s, _ in got) <= 12


@pytest.mark.parametrize("stop", [False, True])
@pytest.mark.parametrize(("lengths", "weights"), [([10, 60], [1, 1]), ([0, 5], [1, 1]), ([3, 0, 40], [1, 2, 3]),
                                                  ([7, 9], [1, 0]), ([1, 1, 1], [5, 1, 1]), ([0, 0], [1, 1])])
def test_len_is_what_one_process_reads(lengths, weights, stop):
    """len() of a mix equals the items its next epoch yields, for empty and zero-weight datasets too."""
    sources = [[(d, i) for i in range(n)] for d, n in enumerate(lengths)]
    for seed in range(5):
        ds = mix(sources, weights=weights, seed=seed, stop_on_first_exhausted=stop)
        for _epoch in range(2):
            n = len(ds)
            assert len(list(ds)) == n


def test_epochs_and_determinism(tmp_path):
    ds = mix(_datasets(tmp_path, [20, 20]), seed=5)
    first, second = keys(ds), keys(ds)
    assert first != second and set(first) == set(second) == {(s, i) for s in "ab" for i in range(20)}
    again = mix(_datasets(tmp_path, [20, 20]), seed=5)
    assert keys(again) == first
    again.set_epoch(0)
    assert keys(again) == first


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("stop", [False, True])
def test_resume_mid_epoch(tmp_path, workers, stop):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        return mix(_datasets(tmp_path, [13, 30]), weights=[2, 1], seed=4, stop_on_first_exhausted=stop)

    kw = dict(num_workers=workers, batch_size=None)
    full = keys(StatefulDataLoader(make(), **kw))
    loader = StatefulDataLoader(make(), **kw)
    it = iter(loader)
    head = keys([next(it) for _ in range(17)])
    state = loader.state_dict()
    del it, loader
    resumed = StatefulDataLoader(make(), **kw)
    resumed.load_state_dict(state)
    assert head + keys(resumed) == full


def test_bad_arguments_and_states(tmp_path):
    a, b = _datasets(tmp_path, [5, 5])
    with pytest.raises(ValueError, match="weights"):
        mix([a, b], weights=[1])
    with pytest.raises(ValueError, match="weights"):
        mix([a, b], weights=[-1, 2])
    with pytest.raises(ValueError, match="at least one"):
        mix([])
    state = mix([a, b], seed=1).state_dict()
    with pytest.raises(ValueError, match="seed"):
        mix([a, b], seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="weights"):
        mix([a, b], seed=1, weights=[2, 1]).load_state_dict(state)


def test_mix_state_dict_refuses_a_position_held_by_plain_dataloader_workers(tmp_path):
    """A mix read through a plain DataLoader with workers raises in state_dict()
    (naming StatefulDataLoader) instead of returning the main process's stale position."""
    datasets = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        write_shards(folder, [10])
        datasets.append(TFRecordDataset(folder))
    mixed = mix(datasets, weights=[1, 1], seed=0)
    it = iter(DataLoader(mixed, num_workers=2, batch_size=None))
    for _ in range(3):
        next(it)
    with pytest.raises(RuntimeError, match="MixedDataset.state_dict.*StatefulDataLoader"):
        mixed.state_dict()


def _saved_under(tmp_path, workers, *, rank=0, world=1, steps=9):
    """A mix read for ``steps`` items as the docs show resuming, and its loader's state."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    sets = [TFRecordDataset(write(tmp_path / n, n, 40), shuffle=True, seed=1,
                            sharding=Sharding(rank=rank, world_size=world)) for n in "ab"]
    loader = StatefulDataLoader(mix(sets, weights=[1, 1], seed=2), num_workers=workers, batch_size=None)
    it = iter(loader)
    for _ in range(steps):
        next(it)
    return loader.state_dict()


def _fresh(tmp_path, rank=0, world=1):
    return mix([TFRecordDataset(write(tmp_path / n, n, 40), shuffle=True, seed=1,
                                sharding=Sharding(rank=rank, world_size=world)) for n in "ab"],
               weights=[1, 1], seed=2)


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
@pytest.mark.parametrize("saved, now", [(2, 3), (2, 1), (1, 2)])
def test_a_mix_resumed_with_another_num_workers_says_how_to_resume(tmp_path, saved, now):
    """Each reader mixes its own shares: a worker's state cannot continue
    under another layout. The error names the mix, the saved num_workers
    and set_epoch, rather than the inner dataset's advice (which a mix cannot take)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    state = _saved_under(tmp_path, saved)
    loader = StatefulDataLoader(_fresh(tmp_path), num_workers=now, batch_size=None)
    loader.load_state_dict(state)
    with pytest.raises(ValueError, match=rf"MixedDataset.load_state_dict: .*worker \d of {saved} on rank 0 of 1, "
                                         rf"here DataLoader worker \d of {now}.*num_workers={saved}.*set_epoch\(0\)"):
        next(iter(loader))


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
@pytest.mark.parametrize("workers", [0, 2])
def test_a_whole_loader_state_given_to_the_mix_says_to_give_it_to_the_loader(tmp_path, workers):
    state = _saved_under(tmp_path, workers)
    with pytest.raises(ValueError, match=rf"StatefulDataLoader's state_dict\(\).*num_workers={workers}.*"
                                         r"loader.load_state_dict.*set_epoch\(0\)"):
        _fresh(tmp_path).load_state_dict(state)


def test_a_mix_resumed_on_another_world_size_is_refused(tmp_path):
    """Without workers a rank's mix state goes to the mix; on another world
    size its datasets would resume elsewhere in the epoch while the mix kept
    the old rank's choices."""
    state = _saved_under(tmp_path, 0, rank=0, world=2)["dataset_state"]  # the mix's own
    with pytest.raises(ValueError, match=r"the main process \(num_workers=0\) on rank 0 of 2, here the main process "
                                         r"\(num_workers=0\) on rank 0 of 1.* world size and num_workers=0,"):
        _fresh(tmp_path).load_state_dict(state)
    resumed = _fresh(tmp_path, rank=0, world=2)
    resumed.load_state_dict(state)  # the same layout resumes where it was
    assert keys(resumed) == keys(_fresh(tmp_path, rank=0, world=2))[9:]


def test_a_mix_state_loaded_without_workers_is_refused_when_workers_read_it(tmp_path):
    """A state loaded into the mix in the main process and then read by a
    loader's workers: each worker would skip the saved steps of its own
    choices and take the saved exhaustion, reading records twice or not at all.
    The first worker's read raises as load_state_dict would."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    state = _saved_under(tmp_path, 0)["dataset_state"]  # the mix's own, saved without workers
    mixed = _fresh(tmp_path)
    mixed.load_state_dict(state)  # the main process: the layout it was saved under
    loader = StatefulDataLoader(mixed, num_workers=2, batch_size=None)
    with pytest.raises(ValueError, match=r"state of the main process \(num_workers=0\) on rank 0 of 1, read by "
                                         r"DataLoader worker \d of 2 .*num_workers=0.*set_epoch\(0\)"):
        next(iter(loader))


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
@pytest.mark.parametrize("saved, now", [(0, 1), (1, 0)])
def test_no_workers_and_one_worker_are_one_layout(tmp_path, saved, now):
    """One reader per rank either way: a mix's own state moves between them
    through mixed.load_state_dict and the epoch resumes where it was."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    full = keys(StatefulDataLoader(_fresh(tmp_path), num_workers=saved, batch_size=None))
    state = _saved_under(tmp_path, saved)
    own = state["dataset_state"] if saved == 0 else state["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    resumed = _fresh(tmp_path)
    resumed.load_state_dict(own)
    assert full[:9] + keys(StatefulDataLoader(resumed, num_workers=now, batch_size=None)) == full


class _Ranked(torch.utils.data.IterableDataset):
    """A user's dataset that names its rank as torch's DistributedSampler does (rank, num_replicas)."""

    def __init__(self, ds):
        super().__init__()
        self.ds, self.rank, self.num_replicas = ds, 0, 1

    def __iter__(self):
        return iter(self.ds)

    def state_dict(self):
        return self.ds.state_dict()

    def load_state_dict(self, state):
        self.ds.load_state_dict(state)


def test_a_first_dataset_with_a_rank_and_no_world_size_mixes_and_resumes(tmp_path):
    def sets():
        return [TFRecordDataset(write(tmp_path / n, n, 20)) for n in "ab"]

    plain = keys(mix(sets(), seed=3))
    a, b = sets()
    mixed = mix([_Ranked(a), b], seed=3)
    it = iter(mixed)
    head = keys([next(it) for _ in range(7)])
    state = mixed.state_dict()
    resumed = mix([_Ranked(TFRecordDataset(tmp_path / "a")), TFRecordDataset(tmp_path / "b")], seed=3)
    resumed.load_state_dict(state)
    assert head + keys(resumed) == plain
