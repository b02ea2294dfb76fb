"""IndexedTFRecordDataset.__getitems__: a batch of indices read in one pass, the same items as ds[i]."""

import threading

import numpy as np
import pytest
import torch
from helpers import image_shards, in_threads, write_shards
from torch.utils.data import DataLoader

from tfrecord_torch import CorruptRecordError, Float, IndexedTFRecordDataset, Int64, build_index, presets
from tfrecord_torch.data import fetch
from tfrecord_torch.features.images import specs as image_specs
from tfrecord_torch.io import pool

SPEC = {"id": Int64(), "x": Float(shape=(3,))}


@pytest.fixture
def shards(tmp_path):
    paths = write_shards(tmp_path, [7, 0, 11, 5])
    for p in paths:
        build_index(p)
    return paths


def same_item(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        else:
            assert type(a[key]) is type(b[key]) and np.array_equal(a[key], b[key]), key


@pytest.mark.parametrize("features", [SPEC, None])
def test_items_in_the_order_asked_with_duplicates_and_negatives(shards, features):
    ds = IndexedTFRecordDataset(shards, features=features)
    n = len(ds)
    indices = [22, 0, 5, 5, 6, 7, -1, 13, 0, 12, 11, 22, -23, 17, 3]
    got = ds.__getitems__(indices)
    assert len(got) == len(indices)
    for i, item in zip(indices, got):
        same_item(item, ds[i])
        assert int(np.asarray(item["id"]).reshape(-1)[0]) == i % n
    if features is not None:  # each item its own tensors: a transform may edit one in place
        got[2]["x"].add_(1)
        assert torch.equal(got[3]["x"], ds[5]["x"])
    assert ds.__getitems__([]) == []
    assert len(ds.__getitems__(np.arange(n))) == n  # numpy and torch integers are indices too
    assert int(np.asarray(ds.__getitems__(torch.tensor([4]))[0]["id"]).reshape(-1)[0]) == 4


def test_out_of_range_raises_before_reading(shards):
    ds = IndexedTFRecordDataset(shards, features=SPEC)
    n = len(ds)
    for bad in ([0, n], [-n - 1], [3, 10**12]):
        with pytest.raises(IndexError, match="out of range"):
            ds.__getitems__(bad)
    with pytest.raises(TypeError):
        ds.__getitems__([1.5])
    with pytest.raises(IndexError):
        ds[n]


def _corrupt(path, record, where):
    """Flip a byte in record ``record`` of a shard of equal-size records."""
    raw = bytearray(path.read_bytes())
    size = len(raw) // {0: 7, 2: 11, 3: 5}[int(path.name.split("-")[1])]
    raw[record * size + (3 if where == "header" else 20)] ^= 0x40
    path.write_bytes(bytes(raw))


def test_bad_records_follow_on_error_like_getitem(shards):
    _corrupt(shards[0], 2, "payload")
    _corrupt(shards[0], 6, "header")  # last of shard 0: its stand-in is the first of shard 2
    _corrupt(shards[2], 4, "payload")
    indices = [6, 2, 11, 2, 0, 22, 9]
    with pytest.raises(CorruptRecordError) as info:  # the first bad one in the order asked
        IndexedTFRecordDataset(shards, features=SPEC).__getitems__(indices)
    assert info.value.record == 6 and info.value.path == str(shards[0])
    one = IndexedTFRecordDataset(shards, features=SPEC, on_error="skip")
    batch = IndexedTFRecordDataset(shards, features=SPEC, on_error="skip")
    want = [one[i] for i in indices]
    got = batch.__getitems__(indices)
    for a, b in zip(got, want):
        same_item(a, b)
    assert [int(item["id"]) for item in got] == [7, 3, 12, 3, 0, 22, 9]
    # each bad record reported once per process; a second request goes straight to its stand-in
    assert batch.errors() == one.errors() == {"total": 3, "per_shard": {str(shards[0]): 2, str(shards[2]): 1}}
    again = batch.__getitems__(indices[::-1])
    assert [int(item["id"]) for item in again] == [7, 3, 12, 3, 0, 22, 9][::-1]
    assert batch.errors()["total"] == 3


def _drawn(item):
    """A transform that draws from torch's global generator, as random augmentations do."""
    item = dict(item)
    item["draw"] = torch.rand(())
    return item


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "usual path"])
def test_a_drawing_transform_gets_the_draws_of_one_by_one(shards, compiled, monkeypatch):
    """``__getitems__`` is ``[ds[i] for i in indices]``: a transform that
    draws gets each index's draw in the order asked (not the records' file
    order), whichever path reads the records, and a bad record's stand-in
    draws where the bad record stands."""
    if not compiled:
        monkeypatch.setattr(fetch, "compiled_reader", lambda: False)
    _corrupt(shards[2], 4, "payload")
    indices = [22, 0, 5, 11, 5, 13, 2, 17, 3]  # 11 is bad: record 4 of shard 2
    one = IndexedTFRecordDataset(shards, features=SPEC, transform=_drawn, on_error="skip")
    batch = IndexedTFRecordDataset(shards, features=SPEC, transform=_drawn, on_error="skip")
    assert batch._fetcher._plan().compiled is compiled
    torch.manual_seed(0)
    want = [one[i] for i in indices]
    torch.manual_seed(0)
    got = batch.__getitems__(indices)
    assert [int(item["id"]) for item in got] == [22, 0, 5, 12, 5, 13, 2, 17, 3]
    for a, b in zip(got, want):
        same_item(a, b)


@pytest.fixture
def images(tmp_path):
    """(path, arrays): 40 PNG records of several sizes, and their pixels."""
    sizes = [(8 + i % 5, 10 + i % 3) for i in range(40)]
    return image_shards(tmp_path, sizes=sizes)


def _decode_threads_seen(monkeypatch):
    """The names of the threads each image decode ran on."""
    seen = []
    real = image_specs.decode_checked

    def spy(*args, **kwargs):
        seen.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(image_specs, "decode_checked", spy)
    return seen


def test_a_batch_of_images_decodes_on_threads_joined_before_it_returns(images, monkeypatch):
    """In a process with cores to spare, a batch's images decode on threads of
    the call (ended when it returns, their readers back in the pool): the
    same items as ds[i], in the order asked."""
    monkeypatch.setattr(fetch, "default_threads", lambda: 2)
    path, arrays = images
    ds = IndexedTFRecordDataset(path, features=presets.tfds())
    seen = _decode_threads_seen(monkeypatch)
    indices = [31, 2, 2, 17, 0, 39, 8, 25, 13, 4]
    got = ds.__getitems__(indices)
    assert {name.rsplit("_", 1)[0] for name in seen} == {"tfrecord_torch-items"}
    assert not [t for t in threading.enumerate() if t.name.startswith("tfrecord_torch-items")]
    for i, item in zip(indices, got):
        assert torch.equal(item["image"], torch.from_numpy(arrays[i]).permute(2, 0, 1)) and int(item["label"]) == i
    made = []
    real_init = pool.Reader.__init__
    monkeypatch.setattr(pool.Reader, "__init__", lambda self, *a, **k: made.append(1) or real_init(self, *a, **k))
    for _ in range(30):  # each call's threads give their readers back: the next call's threads use them
        ds.__getitems__(indices)
    assert len(made) <= 2  # two new files a call (60) when a thread's reader closes with it
    seen.clear()
    ds.__getitems__([3, 1, 2])  # fewer than two threads' worth: on the calling thread
    assert set(seen) == {threading.current_thread().name}


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_of_images_from_eight_threads_and_forked_workers(images, workers):
    path, arrays = images
    ds = IndexedTFRecordDataset(path, features=presets.tfds())
    loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=workers, collate_fn=list,
                        generator=torch.Generator().manual_seed(0))
    rng = np.random.default_rng(0)

    def work():
        for _ in range(5):
            indices = rng.integers(0, 40, 12).tolist()
            for i, item in zip(indices, ds.__getitems__(indices)):
                assert torch.equal(item["image"], torch.from_numpy(arrays[i]).permute(2, 0, 1))

    if workers == 0:
        assert in_threads(work) == []
    labels = []
    for batch in loader:
        for item in batch:
            i = int(item["label"])
            assert torch.equal(item["image"], torch.from_numpy(arrays[i]).permute(2, 0, 1))
            labels.append(i)
    assert sorted(labels) == list(range(40))


def test_dataloader_fetches_batches_with_getitems(shards, monkeypatch):
    ds = IndexedTFRecordDataset(shards, features=SPEC)
    calls = []
    real = IndexedTFRecordDataset.__getitems__
    monkeypatch.setattr(IndexedTFRecordDataset, "__getitems__", lambda self, idx: calls.append(list(idx)) or
                        real(self, idx))
    batches = list(DataLoader(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0)))
    assert sorted(torch.cat([b["id"] for b in batches]).tolist()) == list(range(len(ds)))
    assert len(calls) == len(batches) and all(len(c) <= 4 for c in calls)
    for b, c in zip(batches, calls):
        assert b["id"].tolist() == c and b["x"].shape == (len(c), 3)


def test_threads_get_every_record_right(tmp_path):
    paths = write_shards(tmp_path, [30] * 20)  # more shards than the reader pool keeps open
    ds = IndexedTFRecordDataset(paths, features=SPEC)
    n = len(ds)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(40):
            indices = rng.integers(-n, n, int(rng.integers(1, 40))).tolist()
            for i, item in zip(indices, ds.__getitems__(indices)):
                if int(item["id"]) != i % n or item["x"].tolist() != [i % n] * 3:
                    errors.append((i, item))
            i = int(rng.integers(0, n))
            if int(ds[i]["id"]) != i:
                errors.append((i, "getitem"))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
