"""The cyclic garbage collector in a DataLoader worker (data/workergc.py):
the objects a worker inherits are out of its sight; the worker's own are
collected as before."""

import gc

import pytest
import torch
from torch.utils.data import DataLoader

from tfrecord_torch import IndexedTFRecordDataset, RecordWriter, TFRecordDataset, make_example


class Cycle:
    def __init__(self):
        self.me = self


def _census(item):
    """What the worker's collector sees, and what it collects of a cycle made here."""
    Cycle()
    return {
        "id": item["id"],
        "tracked": torch.tensor(len(gc.get_objects())),
        "collected": torch.tensor(gc.collect()),
    }


def _write(path, n=8):
    with RecordWriter(path) as w:
        for i in range(n):
            w.write(make_example({"id": i}))
    return path


def test_a_worker_does_not_walk_the_objects_it_inherited(tmp_path):
    path = _write(tmp_path / "a.tfrecord")
    frozen = gc.get_freeze_count()  # another test of this process may have frozen objects already
    ballast = [[] for _ in range(100_000)]  # objects the workers inherit, whatever was imported before
    inherited = len(gc.get_objects())
    assert inherited > 100_000
    for ds in (TFRecordDataset(path, transform=_census), IndexedTFRecordDataset(path, transform=_census)):
        for batch in DataLoader(ds, batch_size=4, num_workers=2):
            assert int(batch["tracked"].max()) < inherited // 5
            assert int(batch["collected"].min()) >= 1  # the worker's own cycles are collected
    # the main process is left alone
    assert gc.get_freeze_count() == frozen
    del ballast
    assert len(gc.get_objects()) > inherited // 2


def test_a_process_that_only_looks_like_a_worker_freezes_nothing(tmp_path, monkeypatch):
    """Tests (test_elastic.py) play workers in one process by patching
    get_worker_info; before, that froze the whole test process."""
    import types

    path = _write(tmp_path / "a.tfrecord")
    frozen = gc.get_freeze_count()
    monkeypatch.setattr(
        torch.utils.data, "get_worker_info", lambda: types.SimpleNamespace(id=0, num_workers=1)
    )
    assert [x["id"].item() for x in TFRecordDataset(path)] == list(range(8))
    assert gc.get_freeze_count() == frozen


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_the_switch_leaves_a_worker_as_torch_made_it(tmp_path, monkeypatch):
    """``TFRECORD_TORCH_WORKER_TUNING=off`` (seen by the forked workers): the
    worker's collector still sees what it inherited."""
    from tfrecord_torch.data import workersetup

    path = _write(tmp_path / "a.tfrecord")
    ballast = [[] for _ in range(100_000)]
    inherited = len(gc.get_objects())
    monkeypatch.setenv(workersetup.ENV, "off")
    for batch in DataLoader(TFRecordDataset(path, transform=_census), batch_size=4, num_workers=2,
                            multiprocessing_context="fork"):
        assert int(batch["tracked"].min()) > inherited // 2
    del ballast
