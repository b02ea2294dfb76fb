"""Elastic resume: a state saved by a job of N DataLoader workers on W ranks
resumes its epoch on N' workers and W' ranks, every record of the epoch read
once over the old and the new job, and the next epoch is a full one.

Ranks are simulated by datasets built with ``Sharding(rank=r, world_size=W)``
and DataLoader workers by copies of a rank's dataset iterated under a worker
info, stepped in lockstep the way an in-order DataLoader does: step j takes
the next unit of worker j % N (skipping finished workers)."""

import collections
import pickle
import types

import pytest
import torch.utils.data
from helpers import ids_of, write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import Sharding, Shuffling, TFRecordDataset

LENGTHS = [40, 25, 31]
TOTAL = sum(LENGTHS)
LAYOUTS = [(n, w) for n in (1, 2, 3) for w in (1, 2, 4)]  # (num_workers, world_size)


class Job:
    """One job's ranks x workers, stepped in lockstep; ``per_step`` records
    make a DataLoader batch in record mode (batch mode: one batch a step)."""

    def __init__(self, folder, workers, world, monkeypatch, per_step=2, even=None, **kw):
        self.monkeypatch, self.workers, self.per_step = monkeypatch, workers, per_step
        self.ranks = [TFRecordDataset(folder, sharding=Sharding(rank=r, world_size=world, even=even), **kw)
                      for r in range(world)]
        self.copies = [[pickle.loads(pickle.dumps(ds)) for _ in range(workers)] for ds in self.ranks]
        self.iters = [[None] * workers for _ in self.ranks]
        self.batched = kw.get("batch_size") is not None

    def as_worker(self, w):
        info = types.SimpleNamespace(id=w, num_workers=self.workers)
        self.monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)

    def unit(self, r, w):
        """The next unit (a list of ids) of worker w of rank r, None when done."""
        self.as_worker(w)
        try:
            if self.iters[r][w] is None:
                self.iters[r][w] = iter(self.copies[r][w])
            return ids_of([next(self.iters[r][w])])
        except StopIteration:
            return None
        finally:
            self.monkeypatch.undo()

    def step(self, r, live, turn):
        """One DataLoader step of rank r: ids, or None at the end of the epoch."""
        while live:
            w = live[turn[0] % len(live)]
            if self.batched:
                got = self.unit(r, w)
            else:
                got = []
                for _ in range(self.per_step):
                    one = self.unit(r, w)
                    if one is None:
                        break
                    got += one
            if not got:
                live.remove(w)
                continue
            turn[0] = live.index(w) + 1
            return got
        return None

    def run(self, steps=None):
        """Ids every rank delivers in ``steps`` lockstep steps (all, if None)."""
        out = []
        for r in range(len(self.ranks)):
            live, turn = list(range(self.workers)), [0]
            n = 0
            while steps is None or n < steps:
                got = self.step(r, live, turn)
                if got is None:
                    break
                out += got
                n += 1
        return out

    def state(self, r):
        """Rank r's state, as a StatefulDataLoader with these workers holds it."""
        states = []
        for w in range(self.workers):
            self.as_worker(w)
            try:
                states.append(self.copies[r][w].state_dict())
            finally:
                self.monkeypatch.undo()
        if self.workers == 1:
            return states[0]
        return {"_snapshot": {"_snapshot_step": 1, "_last_yielded_worker_id": 0, "_main_snapshot": {},
                              "_worker_snapshots": {f"worker_{w}": {"worker_id": w, "dataset_state": s}
                                                    for w, s in enumerate(states)}},
                "_steps_since_snapshot": 0, "_iterator_finished": False}

    def load(self, state):
        for ds in self.ranks:
            ds.load_state_dict(state)
        self.copies = [[pickle.loads(pickle.dumps(ds)) for _ in range(self.workers)] for ds in self.ranks]

    def next_epoch(self):
        self.iters = [[None] * self.workers for _ in self.ranks]


def exactly_once(ids):
    return collections.Counter(ids) == collections.Counter(range(TOTAL))


@pytest.fixture
def shards(tmp_path):
    write_shards(tmp_path, LENGTHS)
    return tmp_path


def check_resume(shards, monkeypatch, old, new, steps, **kw):
    (n, w), (n2, w2) = old, new
    before = Job(shards, n, w, monkeypatch, seed=5, **kw)
    head = before.run(steps)
    state = before.state(w - 1 if steps > 8 else steps % w)  # mid-epoch, any rank's state tells what all read
    after = Job(shards, n2, w2, monkeypatch, seed=5, **kw)
    after.load(state)
    rest = after.run()
    assert exactly_once(head + rest), (len(head), len(rest))
    after.next_epoch()
    assert exactly_once(after.run())  # the next epoch is a whole one


# every pair of different layouts (the same layout resumes exactly: test_iterable); the fast set
# keeps a corner of the grid (more and fewer workers and ranks, one up as the other goes down),
# the whole grid is slow
CORNER = {((1, 1), (3, 4)), ((3, 4), (1, 1)), ((2, 1), (1, 4)), ((1, 4), (3, 2))}


@pytest.mark.parametrize("old, new", [
    pytest.param(a, b, id=f"{a}-{b}", marks=() if (a, b) in CORNER else pytest.mark.slow)
    for a in LAYOUTS for b in LAYOUTS if a != b])
@pytest.mark.parametrize("batch_size", [None, 3])
@pytest.mark.parametrize("shuffle", [True, False])
def test_resume_under_another_layout_reads_the_epoch_once(shards, monkeypatch, old, new, batch_size, shuffle):
    check_resume(shards, monkeypatch, old, new, steps=3, shuffle=shuffle, batch_size=batch_size)


@pytest.mark.parametrize("old, new", [((2, 2), (1, 4)), ((3, 4), (2, 1)), ((1, 1), (3, 2)), ((2, 1), (1, 2))],
                         ids=str)
@pytest.mark.parametrize("batch_size", [None, 3])
@pytest.mark.parametrize("steps", [0, 1, 3, 100])  # 100: the end of the epoch
def test_resume_in_order_at_any_step(shards, monkeypatch, old, new, batch_size, steps):
    """Without shuffling, from the start, mid-epoch and at the end of the epoch."""
    check_resume(shards, monkeypatch, old, new, steps=steps, batch_size=batch_size)


@pytest.mark.parametrize("old, new", [((2, 2), (3, 1)), ((1, 4), (2, 2))], ids=str)
def test_resume_with_another_batch_size_and_even_mode(shards, monkeypatch, old, new):
    """Positions, not batches, are carried over: batch size and even="drop"
    may change; with "drop" the epoch's left-out records stay unread."""
    (n, w), (n2, w2) = old, new
    before = Job(shards, n, w, monkeypatch, shuffle=True, batch_size=4)
    head = before.run(2)
    after = Job(shards, n2, w2, monkeypatch, shuffle=True, per_step=3)
    after.load(before.state(0))
    assert exactly_once(head + after.run())
    dropped = Job(shards, n2, w2, monkeypatch, shuffle=True, batch_size=2, even="drop")
    dropped.load(before.state(0))
    got = head + dropped.run()
    assert len(set(got)) == len(got) and TOTAL - len(got) < w2 * 2


def test_resume_twice_under_other_layouts(shards, monkeypatch):
    """A resumed epoch's state resumes again under a third layout."""
    first = Job(shards, 2, 2, monkeypatch, shuffle=True)
    head = first.run(2)
    second = Job(shards, 3, 1, monkeypatch, shuffle=True)
    second.load(first.state(1))
    middle = second.run(1)
    third = Job(shards, 1, 4, monkeypatch, shuffle=True)
    third.load(second.state(0))
    assert exactly_once(head + middle + third.run())


def test_end_of_epoch_needs_the_rank_with_the_longest_share(tmp_path, monkeypatch):
    """At the end of the epoch a rank with fewer records cannot tell whether
    the others still read; the last rank's state can."""
    write_shards(tmp_path, [13, 9, 11])  # ranks of 2 hold 16 and 17 records
    before = Job(tmp_path, 1, 2, monkeypatch, per_step=4)
    head = before.run(4)  # rank 0 read all 16 of its records, rank 1 16 of its 17
    after = Job(tmp_path, 2, 1, monkeypatch)
    with pytest.raises(ValueError, match=r"last rank \(rank 1\)"):
        after.load(before.state(0))
    after.load(before.state(1))
    assert collections.Counter(head + after.run()) == collections.Counter(range(33))


@pytest.mark.parametrize("setup, match", [
    (dict(sharding=Sharding(rank=0, world_size=2, even="pad")), "even='pad'"),
    (dict(shuffle=Shuffling(block=4)), r"block shuffle"),
    (dict(shuffle=Shuffling(buffer=8)), r"shuffle buffer"),
])
def test_layouts_a_position_cannot_carry_are_refused(shards, setup, match):
    old = TFRecordDataset(shards, **{"sharding": Sharding(rank=0, world_size=2), **setup})
    it = iter(old)
    next(it)
    new = TFRecordDataset(shards, **{**setup, "sharding": Sharding(rank=0, world_size=3)})
    with pytest.raises(ValueError, match=match):
        new.load_state_dict(old.state_dict())


def test_compressed_shards_are_refused_under_another_layout(tmp_path):
    write_shards(tmp_path, [10, 10], compression="gzip")
    old = TFRecordDataset(tmp_path, sharding=Sharding(rank=0, world_size=2))
    next(iter(old))
    with pytest.raises(ValueError, match="compressed.*decompress"):
        TFRecordDataset(tmp_path).load_state_dict(old.state_dict())


def test_other_seed_or_shards_are_still_refused_under_another_layout(shards):
    old = TFRecordDataset(shards, shuffle=True, seed=1, sharding=Sharding(rank=0, world_size=2))
    next(iter(old))
    with pytest.raises(ValueError, match="seed: state has 1, dataset has 2"):
        TFRecordDataset(shards, shuffle=True, seed=2).load_state_dict(old.state_dict())


def stateful(ds, workers, batch_size):
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(ds, num_workers=workers, batch_size=None if batch_size else 4)


# fast: fewer workers in record mode, from the main process to workers in batch mode; the rest slow
@pytest.mark.parametrize("batch_size, old, new", [
    pytest.param(batch_size, old, new, id=f"{batch_size}-{old}-{new}",
                 marks=() if (batch_size, old, new) in {(None, 2, 1), (4, 0, 2)} else pytest.mark.slow)
    for batch_size in (None, 4) for old, new in ((2, 1), (1, 2), (0, 2))])
def test_stateful_dataloader_state_resumes_with_another_num_workers(shards, old, new, batch_size):
    """The README's way: ``ds.load_state_dict(loader.state_dict())``, then a
    new StatefulDataLoader with the new num_workers; its own states resume
    exactly again."""
    def make():
        return TFRecordDataset(shards, shuffle=True, seed=4, batch_size=batch_size)

    loader = stateful(make(), old, batch_size)
    it = iter(loader)
    head = ids_of([next(it) for _ in range(5)])
    state = loader.state_dict()
    del it, loader
    ds = make()
    ds.load_state_dict(state)
    resumed = stateful(ds, new, batch_size)
    it = iter(resumed)
    middle = ids_of([next(it) for _ in range(3)])
    again = resumed.state_dict()
    del it, resumed
    last = stateful(make(), new, batch_size)
    last.load_state_dict(again)  # the same layout: torchdata gives each worker its own state
    assert exactly_once(head + middle + ids_of(last))
    assert exactly_once(ids_of(last))  # then a whole epoch


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # torchdata's shutdown after a worker's error
@pytest.mark.parametrize("old, new", [(2, 1), (1, 2)])
def test_loader_load_state_dict_with_another_num_workers_says_what_to_do(shards, old, new):
    """torchdata hands worker i the old worker i's state only (or none); a
    worker refuses it instead of reading its share twice or not at all."""
    loader = stateful(TFRecordDataset(shards, shuffle=True), old, None)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    del it, loader
    resumed = stateful(TFRecordDataset(shards, shuffle=True), new, None)
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match=r"ds\.load_state_dict\(old_loader\.state_dict\(\)\)"):
        ids_of(resumed)


def test_state_loaded_in_main_process_is_shared_by_plain_dataloader_workers(shards):
    """A state saved without workers tells what the epoch consumed; plain
    DataLoader workers then share the rest."""
    ds = TFRecordDataset(shards, shuffle=True)
    it = iter(ds)
    head = ids_of([next(it) for _ in range(7)])
    fresh = TFRecordDataset(shards, shuffle=True)
    fresh.load_state_dict(ds.state_dict())
    loader = DataLoader(fresh, num_workers=2, batch_size=None)
    assert exactly_once(head + ids_of(loader))
    assert exactly_once(ids_of(loader))


def test_set_epoch_after_loading_resumes_only_the_saved_epoch(shards):
    """A training loop calls set_epoch(epoch) each epoch, the resumed one too."""
    old = TFRecordDataset(shards, shuffle=True, sharding=Sharding(rank=1, world_size=2))
    old.set_epoch(3)
    it = iter(old)
    head = ids_of([next(it) for _ in range(10)])
    state = old.state_dict()
    full = TFRecordDataset(shards, shuffle=True, sharding=Sharding(rank=0, world_size=2))
    full.set_epoch(3)
    head += ids_of([item for _, item in zip(range(10), full)])  # rank 0 in lockstep
    new = TFRecordDataset(shards, shuffle=True)
    new.load_state_dict(state)
    new.set_epoch(3)
    assert exactly_once(head + ids_of(new))
    other = TFRecordDataset(shards, shuffle=True)
    other.load_state_dict(state)
    other.set_epoch(4)  # another epoch than the state's: a whole one
    assert exactly_once(ids_of(other))


def test_one_rank_resumes_with_other_workers_at_the_end_of_the_epoch(tmp_path, monkeypatch):
    """One rank's workers that ran out at different steps: its state alone
    says what was read (no other rank to guess)."""
    write_shards(tmp_path, [13, 9, 11])  # 3 workers hold 11 records each
    before = Job(tmp_path, 3, 1, monkeypatch, per_step=4)
    head = before.run(8)  # workers 0 and 1 ran out, worker 2 has 3 records left
    after = Job(tmp_path, 2, 2, monkeypatch)
    after.load(before.state(0))
    assert collections.Counter(head + after.run()) == collections.Counter(range(33))
