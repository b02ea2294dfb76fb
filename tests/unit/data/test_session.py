"""ReadSession: one iteration's I/O, closed once, in one order, "ended" only
when the iteration ran to its end (whichever way the datasets' iterations end)."""

import gc

import pytest
from helpers import write_shards

from tfrecord_torch import IndexedTFRecordDataset, Int64, ShardCache, Source, TFRecordDataset
from tfrecord_torch.data import session as session_module
from tfrecord_torch.data.session import ReadSession, RemoteShards, Scatter
from tfrecord_torch.io.copies import ShardCopies
from tfrecord_torch.io.pool import ReaderPool

SPEC = {"id": Int64()}


@pytest.fixture
def closes(monkeypatch):
    """Each ReadSession.close call's ``ended``, in order."""
    seen = []
    real = ReadSession.close

    def close(self, ended):
        seen.append(ended)
        real(self, ended)

    monkeypatch.setattr(ReadSession, "close", close)
    return seen


MODES = {
    "records": {},
    "records, shuffled": {"shuffle": True},
    "batches": {"batch_size": 4},
    "batches, shuffled": {"batch_size": 4, "shuffle": True},
    "streamed": {"source": Source(index=False)},
    "streamed batches": {"source": Source(index=False), "batch_size": 4},
}


@pytest.mark.parametrize("options", MODES.values(), ids=MODES.keys())
def test_an_iteration_closes_its_session_once_ended_only_when_read_to_its_end(tmp_path, closes, options):
    paths = write_shards(tmp_path, [9, 7, 8])
    ds = TFRecordDataset(paths, features=SPEC, **options)

    assert len(list(ds)) > 0  # exhausted
    assert closes == [True]

    closes.clear()
    for _ in ds:  # break
        break
    assert closes == [False]

    closes.clear()
    it = iter(ds)
    next(it)
    del it  # a suspended iterator dropped
    gc.collect()
    assert closes == [False]

    closes.clear()
    with pytest.raises(Exception):  # noqa: B017 - the transform's error, however the dataset names it
        for _ in TFRecordDataset(paths, features=SPEC, transform=lambda item: 1 / 0, **options):
            pass
    assert closes == [False]


class _Noted:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def close(self, *args, **kwargs):
        self.log.append((self.name, *args, *kwargs.values()))


def test_close_order_copying_ahead_copies_adopted_readers(tmp_path, monkeypatch):
    log = []
    monkeypatch.setattr(ShardCopies, "close", lambda self, finish=False: log.append(("copies", finish)))
    monkeypatch.setattr(ReaderPool, "close", lambda self: log.append(("readers",)))
    monkeypatch.setattr(session_module, "copy_ahead", lambda copies, order: _Noted(log, "ahead"))
    copies = ShardCopies(ShardCache(str(tmp_path / "cache")), {})
    remote = RemoteShards(None, copies=copies)
    paths = ["s3://bucket/a", "s3://bucket/b"]
    for ended, how in ((True, None), (False, GeneratorExit), (False, ValueError)):
        session = ReadSession(remote, paths, indexes=[None, None], order=[1, 0], scatter=None)
        session.adopt(_Noted(log, "engine"))
        log.clear()  # the last session's pool, collected
        if how is None:
            with session:
                pass
        else:
            with pytest.raises(how), session:
                raise how()
        assert log == [("ahead", ended), ("copies", ended), ("engine",), ("readers",)]
        assert session.copies is not copies  # this iteration's, none of its objects checked yet


def test_a_shuffled_session_fills_its_share_and_a_lasting_one_the_datasets_copies(tmp_path):
    copies = ShardCopies(ShardCache(str(tmp_path / "cache")), {})
    remote = RemoteShards(None, copies=copies)
    paths = [f"s3://bucket/{i}" for i in range(40)] + ["local.tfrecord"]
    assert ReadSession(remote, paths, indexes=[None] * 41).copies.fills == 3  # in order: the default
    scattered = ReadSession(remote, paths, indexes=[None] * 41, scatter=Scatter(reads=10**6, workers=2))
    assert scattered.copies.fills == 8  # 40 remote shards over 2 workers: 20 each, at most MAX_FILLS
    assert ReadSession(remote, paths, indexes=[None] * 41, scatter=Scatter(10**6, 10)).copies.fills == 4
    assert ReadSession(remote, paths, indexes=[None] * 41, fresh=False).copies is copies


def test_a_map_style_dataset_reads_on_after_close(tmp_path):
    paths = write_shards(tmp_path, [5, 6])
    ds = IndexedTFRecordDataset(paths, features=SPEC)
    first = [int(ds[i]["id"]) for i in range(len(ds))]
    ds.close()
    assert [int(ds[i]["id"]) for i in range(len(ds))] == first
