"""Batch mode's prefetch: batches started ahead on a producer thread.

The oracle is the same dataset with ``Batching(prefetch=0)`` (no thread):
prefetching changes when the work is done, never what comes out -- the
batches bit for bit (fused crops, and the transform after them drawing from
torch's global generator between the loop's own draws), the errors and their
place, the skip counts, the resume position. Stopping early leaves no thread.
"""

import gc
import threading
import time

import numpy as np
import pytest
import torch
from helpers import png_bytes
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from tfrecord_torch import (
    Batching,
    CorruptRecordError,
    FeatureError,
    Image,
    ImageBatching,
    Int64,
    RecordWriter,
    TFRecordDataset,
    build_index,
    make_example,
)
from tfrecord_torch._pending import Done, Later
from tfrecord_torch.data.prefetch import Prefetcher, Started, ahead

SPEC = {"image": Image(), "label": Int64()}
# a fused head (crop + flip from the batch's own generator), then per-image draws from torch's global one
TRANSFORM = v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip(), v2.RandomGrayscale(0.5)])
CROP = v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip()])  # the batch's own generator only


def jpeg(i, h=40, w=48):
    rng = np.random.default_rng(i)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], -1)
    return png_bytes(np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8), "JPEG", quality=90)


def write(path, images):
    with RecordWriter(path) as w:
        for i, data in enumerate(images):
            w.write(make_example({"image": data, "label": i}))
    return path


def dataset(path, prefetch, **kw):
    return TFRecordDataset(path, features=SPEC, batch_size=4, batching=Batching(prefetch=prefetch), **kw)


def producers():
    return [t for t in threading.enumerate() if t.name.startswith(("tfrecord-prefetch", "tfrecord-decode"))]


def train(loader):
    """A training loop's view: each batch, and a draw of the loop's own from torch's global generator."""
    out = []
    for batch in loader:
        out.append((batch["label"].clone(), batch["image"].clone(), torch.rand(1)))
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_and_global_draws_equal_no_prefetch(tmp_path, workers):
    path = write(tmp_path / "a.tfrecord", [jpeg(i, 40 + i % 3, 48) for i in range(30)])
    runs = {}
    for prefetch in (0, 1, 3):
        torch.manual_seed(5)
        loader = DataLoader(dataset(path, prefetch, transform=TRANSFORM, shuffle=True, seed=2),
                            batch_size=None, num_workers=workers)
        runs[prefetch] = train(loader)
    assert len(runs[0]) == 8
    for prefetch in (1, 3):
        for (la, ia, ra), (lb, ib, rb) in zip(runs[0], runs[prefetch], strict=True):
            assert torch.equal(la, lb) and torch.equal(ia, ib) and torch.equal(ra, rb)


def test_unfused_per_record_transform_equals_no_prefetch(tmp_path):
    """images=False: each record decoded and transformed as torchvision would,
    the transform on the loop's thread when the batch is taken."""
    path = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(12)])
    runs = []
    for prefetch in (0, 2):
        torch.manual_seed(1)
        ds = TFRecordDataset(path, features=SPEC, batch_size=4, transform=TRANSFORM,
                             batching=Batching(images=False, prefetch=prefetch))
        runs.append(train(ds))
    for (la, ia, ra), (lb, ib, rb) in zip(*runs, strict=True):
        assert torch.equal(la, lb) and torch.equal(ia, ib) and torch.equal(ra, rb)


@pytest.mark.parametrize("how", ["break", "del", "error"])
def test_no_thread_left_when_the_loop_stops_early(tmp_path, how):
    path = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(40)])
    ds = dataset(path, 2)
    if how == "break":
        for _ in DataLoader(ds, batch_size=None, num_workers=0):
            break
    elif how == "del":
        it = iter(DataLoader(ds, batch_size=None, num_workers=0))
        next(it), next(it)
        assert any(t.name == "tfrecord-prefetch" for t in producers())
        del it
    else:
        with pytest.raises(RuntimeError, match="the loop's own"):
            for _ in ds:
                raise RuntimeError("the loop's own error")
    gc.collect()
    assert producers() == []
    assert [b["label"].tolist() for b in ds][:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # and it reads again
    assert producers() == []


def test_workers_stopped_early_leave_no_thread_here(tmp_path):
    path = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(40)])
    loader = DataLoader(dataset(path, 2), batch_size=None, num_workers=2)
    for batch in loader:
        assert batch["label"].tolist() == [0, 1, 2, 3]
        break
    gc.collect()
    assert producers() == []
    assert [b["label"].tolist()[0] for b in loader] == list(range(0, 40, 4))


def _corrupt_image_dataset(tmp_path):
    images = [jpeg(i) for i in range(20)]
    images[9] = images[9][:len(images[9]) // 2]  # batch 3 of 5: a truncated JPEG
    return write(tmp_path / "a.tfrecord", images)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_corrupt_image_mid_epoch_raises_in_its_place(tmp_path, prefetch):
    path = _corrupt_image_dataset(tmp_path)
    seen = []
    with pytest.raises(FeatureError, match=r"record 9 at byte offset \d+: feature 'image'"):
        for batch in dataset(path, prefetch):
            seen.append(batch["label"].tolist())
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert producers() == []


def test_a_corrupt_image_mid_epoch_is_skipped_as_without_prefetch(tmp_path):
    path = _corrupt_image_dataset(tmp_path)
    reported = {}
    for prefetch in (0, 2):
        errors = []
        ds = dataset(path, prefetch, on_error=errors.append, transform=TRANSFORM)
        torch.manual_seed(0)
        reported[prefetch] = (train(ds), [e.record for e in errors], ds.errors()["total"])
    (plain, records, total), (ahead_, records2, total2) = reported[0], reported[2]
    assert [b[0].tolist() for b in ahead_][2] == [8, 10, 11]
    assert records == records2 == [9] and total == total2 == 1
    for (la, ia, ra), (lb, ib, rb) in zip(plain, ahead_, strict=True):
        assert torch.equal(la, lb) and torch.equal(ia, ib) and torch.equal(ra, rb)


def test_a_corrupt_record_comes_after_the_batches_before_it(tmp_path):
    path = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(24)])
    data = bytearray(path.read_bytes())
    offsets, at = [], 0
    while at < len(data):
        offsets.append(at)
        at += 16 + int.from_bytes(data[at:at + 8], "little")
    data[offsets[13] + 20] ^= 0xFF  # a CRC error in batch 4 of 6
    path.write_bytes(bytes(data))
    build_index(path, on_error="skip")
    seen = []
    with pytest.raises(CorruptRecordError, match="record 13"):
        for batch in dataset(path, 2):
            seen.append(batch["label"].tolist()[0])
    assert seen == [0, 4, 8]
    skipped = dataset(path, 2, on_error="skip")
    assert [b["label"].tolist()[0] for b in skipped] == [0, 4, 8, 12, 16, 20]
    assert skipped.errors()["total"] == 1


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_counts_batches_taken_not_started(tmp_path, workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    path = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(44)])

    def make(prefetch):
        return dataset(path, prefetch, transform=CROP, shuffle=True, seed=4)

    full = [b["image"] for b in StatefulDataLoader(make(0), batch_size=None, num_workers=workers)]
    loader = StatefulDataLoader(make(3), batch_size=None, num_workers=workers)
    it = iter(loader)
    head = [next(it)["image"] for _ in range(4)]
    if workers == 0:
        assert loader.dataset.state_dict()["position"] == 4
    state = loader.state_dict()
    del it, loader
    resumed = StatefulDataLoader(make(3), batch_size=None, num_workers=workers)
    resumed.load_state_dict(state)
    rest = [b["image"] for b in resumed]
    assert len(head) + len(rest) == len(full) == 11
    for a, b in zip(head + rest, full, strict=True):
        assert torch.equal(a, b)


def test_compressed_shards_prefetch_too(tmp_path):
    plain = write(tmp_path / "a.tfrecord", [jpeg(i) for i in range(10)])
    import gzip

    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "a.tfrecord.gz").write_bytes(gzip.compress(plain.read_bytes()))
    runs = []
    for prefetch in (0, 2):
        torch.manual_seed(0)
        ds = TFRecordDataset(tmp_path / "z", features=SPEC, batch_size=4, transform=TRANSFORM,
                             batching=Batching(prefetch=prefetch))
        assert ds.streamed
        runs.append(train(ds))
    assert [b[0].tolist() for b in runs[1]] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    for (la, ia, ra), (lb, ib, rb) in zip(*runs, strict=True):
        assert torch.equal(la, lb) and torch.equal(ia, ib) and torch.equal(ra, rb)


def test_prefetch_is_checked():
    with pytest.raises(ValueError, match=r"Batching.prefetch must be an int >= 0, got -1"):
        Batching(prefetch=-1)
    with pytest.raises(ValueError, match="Batching.prefetch"):
        Batching(prefetch=1.5)
    assert Batching().prefetch == 2 and Batching(images=ImageBatching(), prefetch=0).prefetch == 0


def _source(log, n, fail_at=None):
    for i in range(n):
        log.append((i, threading.current_thread().name))
        if i == fail_at:
            raise KeyError(i)
        yield Started(i + 1, Later(lambda i=i: (i, threading.current_thread().name)))


def test_prefetcher_runs_a_bounded_distance_ahead_on_its_thread():
    log = []
    prefetcher = Prefetcher(_source(log, 10), depth=2)
    items = iter(prefetcher)
    first = next(items)

    def started(n):  # the producer goes on while the consumer waits
        deadline = time.monotonic() + 30
        while len(log) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        return len(log)

    assert started(2) == 2  # the one taken and one more
    assert first.position == 1 and first.batch.result() == (0, threading.current_thread().name)
    prefetcher.taken()
    assert started(3) == 3 and {name for _, name in log} == {"tfrecord-prefetch"}
    positions = []
    for item in items:
        positions.append(item.position)
        prefetcher.taken()
    assert positions == list(range(2, 11))
    prefetcher.close()
    assert not prefetcher.alive


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_ahead_delivers_in_order_then_the_error(depth):
    log = []
    out = []
    with pytest.raises(KeyError):
        for position, value in ahead(_source(log, 10, fail_at=6), depth):
            out.append((position, value[0]))
    assert out == [(p, p - 1) for p in range(1, 7)]
    assert not [t for t in threading.enumerate() if t.name == "tfrecord-prefetch"]


def test_ahead_closes_its_source_on_the_producer_thread():
    closed = []

    def source():
        try:
            for i in range(100):
                yield Started(i + 1, Done(i))
        finally:
            closed.append(threading.current_thread().name)

    it = ahead(source(), 2)
    assert next(it) == (1, 0)
    it.close()
    assert closed == ["tfrecord-prefetch"]


def test_the_producer_starts_a_batch_after_the_consumers_call_not_during_it(monkeypatch):
    # room is made as a batch is handed over, inside the loop's next(); the producer's Python
    # started then took the GIL from the rest of that next(). It waits SETTLE first (here a
    # minute), unless the loop already waits for a batch.
    monkeypatch.setattr("tfrecord_torch.data.prefetch.SETTLE", 60.0)
    log = []
    it = ahead(_source(log, 10), 1)
    assert next(it)[0] == 1
    time.sleep(0.2)
    assert len(log) == 1  # room made at the hand-over, yet the next batch not started
    assert next(it)[0] == 2  # the loop waits for it: started at once
    it.close()
    assert not [t for t in threading.enumerate() if t.name == "tfrecord-prefetch"]
