"""A DataLoader worker gives up its core once after each batch it sends
(data/workersend.py): counted by an ``os.sched_yield`` the forked workers
inherit, in every dataset and mode; never in the main process, never with
the worker switch off."""

import multiprocessing
import os
import types

import pytest
import torch
from torch.utils.data import DataLoader

from tfrecord_torch import IndexedTFRecordDataset, RecordWriter, TFRecordDataset, make_example
from tfrecord_torch.data import workersend, workersetup

RECORDS = 30


@pytest.fixture
def path(tmp_path):
    with RecordWriter(tmp_path / "a.tfrecord") as w:
        for i in range(RECORDS):
            w.write(make_example({"id": i}))
    return tmp_path / "a.tfrecord"


@pytest.fixture
def yields(monkeypatch):
    """The ``os.sched_yield`` calls of this process and of the workers it forks, counted."""
    count = multiprocessing.get_context("fork").Value("i", 0)

    def counted():
        with count.get_lock():
            count.value += 1

    monkeypatch.setattr(os, "sched_yield", counted)
    return count


def _ids(batches) -> list[int]:
    return sorted(int(i) for b in batches for i in b["id"].reshape(-1))


@pytest.mark.parametrize("batch", [4, 5, 7])
def test_a_per_sample_worker_yields_once_after_each_batch_it_sends(path, yields, batch):
    loader = DataLoader(TFRecordDataset(path), batch_size=batch, num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    assert _ids(batches) == list(range(RECORDS))  # nothing lost or repeated
    # a worker asks for another item after each batch it sends, and yields first; after a short batch,
    # its share's last, torch asks for nothing more (each worker's 15 records: one short batch for 4 and 7)
    short = sum(len(b["id"]) < batch for b in batches)
    assert short == (0 if batch == 5 else 2)
    assert yields.value == len(batches) - short


def test_a_batch_mode_worker_yields_once_after_each_batch_it_sends(path, yields):
    ds = TFRecordDataset(path, batch_size=4)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork"))
    assert _ids(batches) == list(range(RECORDS))
    assert yields.value == len(batches)


def test_a_map_style_worker_yields_before_each_batch_but_its_first(path, yields):
    loader = DataLoader(IndexedTFRecordDataset(path), batch_size=4, num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    assert _ids(batches) == list(range(RECORDS))
    assert yields.value == len(batches) - 2  # each worker's first batch has none sent before it


def test_the_main_process_never_yields(path, yields):
    assert _ids(DataLoader(TFRecordDataset(path), batch_size=4)) == list(range(RECORDS))
    assert _ids(DataLoader(TFRecordDataset(path, batch_size=4), batch_size=None)) == list(range(RECORDS))
    assert yields.value == 0
    assert not workersend.yields_after_sends()


def test_a_process_that_only_looks_like_a_worker_does_not_yield(path, yields, monkeypatch):
    """Tests play workers in one process by patching get_worker_info (test_elastic.py)."""
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: types.SimpleNamespace(id=0, num_workers=1))
    workersend.yield_after_sends()
    assert not workersend.yields_after_sends()
    workersend.sent()
    workersend.settle()
    assert yields.value == 0


@pytest.mark.slow  # seconds of workers starting: CI's set
def test_the_switch_leaves_the_worker_to_the_scheduler(path, yields, monkeypatch):
    """``TFRECORD_TORCH_WORKER_TUNING=off`` (seen by the forked workers): no yield."""
    monkeypatch.setenv(workersetup.ENV, "off")
    batches = list(DataLoader(TFRecordDataset(path), batch_size=4, num_workers=2, multiprocessing_context="fork"))
    assert _ids(batches) == list(range(RECORDS))
    assert yields.value == 0
