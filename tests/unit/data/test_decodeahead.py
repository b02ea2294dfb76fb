"""The per-sample path decodes image records on the iteration's decode
threads (data/decodeahead.py): the same items, transform draws, errors and
positions as decoding each record on the iterating thread, the threads joined
however the iteration ends."""

import re
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import in_threads, png_bytes
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from tfrecord_torch import (
    Batching,
    Image,
    ImageBatching,
    Int64,
    ReadBudget,
    RecordWriter,
    Source,
    TFRecordDataset,
    build_index,
    make_example,
)
from tfrecord_torch.errors import CorruptRecordError, FeatureError

N = 96
BAD = (7, 30)


def _write(path, bad=(), compression=None):
    rng = np.random.default_rng(0)
    with RecordWriter(path, compression=compression) as w:
        for i in range(N):
            data = b"not a jpeg" if i in bad else png_bytes(
                rng.integers(0, 255, (48, 56, 3), dtype=np.uint8), "JPEG", quality=90)
            w.write(make_example({"image": data, "label": i}))
    return str(path)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("ahead") / "good.tfrecord")


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("ahead") / "bad.tfrecord", bad=BAD)


def _dataset(path, threads, **kwargs):
    return TFRecordDataset(path, features={"image": Image(), "label": Int64()},
                           batching=Batching(images=ImageBatching(threads=threads)), **kwargs)


def _decode_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("tfrecord-decode")]


def _same_items(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert list(x) == list(y)
        for key in x:
            if isinstance(x[key], torch.Tensor):
                assert (type(x[key]), x[key].dtype, x[key].shape, x[key].stride()) == \
                    (type(y[key]), y[key].dtype, y[key].shape, y[key].stride()), key
                assert torch.equal(x[key], y[key]), key
            else:
                assert x[key] == y[key], key


RECORD_BYTES = 3 * 48 * 56 + 8  # a decoded record's tensors: the image and the label


def _hold_ahead(monkeypatch, records: int) -> None:
    """At most ``records`` decoded records held ahead (the forked workers inherit it)."""
    from tfrecord_torch.data import decodeahead

    monkeypatch.setattr(decodeahead, "AHEAD_BYTES", records * RECORD_BYTES)


def _counting_decodes(monkeypatch) -> list:
    """The records whose decode began, in the order begun (on any thread)."""
    from tfrecord_torch.data.recordspec import ExampleRecords

    started: list = []
    decoded = ExampleRecords.decoded

    def counted(self, item):
        started.append(item.record)  # list.append: one step, safe from the decode threads
        return decoded(self, item)

    monkeypatch.setattr(ExampleRecords, "decoded", counted)
    return started


def _text(value):
    """``value``'s text without object addresses (Pillow names its BytesIO)."""
    return re.sub(r"0x[0-9a-f]+", "0x", str(value))


class Seen:
    """A transform that notes the decode threads alive and the thread it runs on."""

    def __init__(self):
        self.decode_threads, self.on = set(), set()

    def __call__(self, item):
        self.decode_threads.update(_decode_threads())
        self.on.add(threading.current_thread().name)
        return item


@pytest.mark.parametrize("shuffle", [False, True])
def test_images_decode_on_threads_into_the_same_items(good, shuffle):
    seen = Seen()
    threaded = _dataset(good, 2, shuffle=shuffle, seed=3, transform=seen)
    one = _dataset(good, 1, shuffle=shuffle, seed=3)
    got = list(threaded)
    assert seen.decode_threads and seen.on == {threading.current_thread().name}
    assert not _decode_threads()  # joined at the end of the iteration
    _same_items(got, list(one))
    assert sorted(int(x["label"]) for x in got) == list(range(N))


def test_the_transform_draws_in_order_on_the_iterating_thread(good):
    def draw(item):
        return {**item, "draw": torch.rand(()).item(), "on": threading.current_thread().name}

    torch.manual_seed(0)
    threaded = list(_dataset(good, 2, shuffle=True, seed=1, transform=draw))
    torch.manual_seed(0)
    one = list(_dataset(good, 1, shuffle=True, seed=1, transform=draw))
    _same_items(threaded, one)
    assert {x["on"] for x in threaded} == {threading.current_thread().name}


def test_a_bad_record_raises_where_it_stands(bad):
    got = []
    with pytest.raises(FeatureError) as threaded:
        for item in _dataset(bad, 2):
            got.append(int(item["label"]))
    assert got == list(range(BAD[0]))
    with pytest.raises(FeatureError) as one:
        list(_dataset(bad, 1))
    assert _text(threaded.value) == _text(one.value)
    assert f"record {BAD[0]}" in str(threaded.value)
    assert not _decode_threads()


def test_bad_records_are_reported_in_order_and_left_out(bad):
    def run(threads):
        ds = _dataset(bad, threads, on_error="warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            items = list(ds)
        return items, [_text(w.message) for w in caught], ds.errors()

    threaded, one = run(2), run(1)
    _same_items(threaded[0], one[0])
    assert threaded[1:] == one[1:]
    assert [f"record {r} " in m for r, m in zip(BAD, threaded[1])] == [True, True]
    assert [int(x["label"]) for x in threaded[0]] == [i for i in range(N) if i not in BAD]


def test_compressed_shards_decode_on_threads_too(tmp_path):
    path = _write(tmp_path / "z.tfrecord.gz", compression="gzip")
    seen = Seen()
    got = list(_dataset(path, 2, transform=seen))
    assert seen.decode_threads
    _same_items(got, list(_dataset(path, 1)))


def test_a_break_leaves_no_decode_thread(good, monkeypatch):
    _hold_ahead(monkeypatch, 16)  # fewer than the file has: the threads wait for room (they end once the read ends)
    for i, _ in enumerate(DataLoader(_dataset(good, 2), batch_size=8)):
        if i == 2:
            assert _decode_threads()
            break
    assert not _decode_threads()


def test_a_fused_crop_decodes_on_the_iterating_thread(good):
    """The crop and flip are drawn from torch's global generator while the
    image decodes, in the records' order: no decode thread; the same items
    and draws as with one thread."""
    seen = Seen()
    crop = v2.Compose([v2.RandomResizedCrop(24), v2.RandomHorizontalFlip(), v2.Lambda(seen)])
    torch.manual_seed(5)
    got = list(_dataset(good, 2, transform=crop))
    assert not seen.decode_threads and seen.on == {threading.current_thread().name}
    torch.manual_seed(5)
    _same_items(got, list(_dataset(good, 1, transform=crop)))
    assert got[0]["image"].shape == (3, 24, 24)


class OwnImage(Image):
    """A feature kind defined outside the package."""


def test_a_feature_kind_from_elsewhere_decodes_on_the_iterating_thread(good):
    seen = Seen()
    got = list(TFRecordDataset(good, features={"image": OwnImage(), "label": Int64()},
                               batching=Batching(images=ImageBatching(threads=2)), transform=seen))
    assert not seen.decode_threads
    _same_items(got, list(_dataset(good, 1)))


def test_cheap_records_decode_on_the_iterating_thread(good):
    seen = Seen()
    list(TFRecordDataset(good, features={"label": Int64()}, batching=Batching(images=ImageBatching(threads=2)), transform=seen))
    assert not seen.decode_threads


def test_a_transform_reassigned_mid_iteration_applies_from_the_next_record(good):
    def runs(threads):
        ds = _dataset(good, threads)
        out = []
        for i, item in enumerate(ds):
            out.append(item)
            if i == 10:
                ds.transform = lambda x: {**x, "late": True}
        return out

    threaded, one = runs(2), runs(1)
    _same_items(threaded, one)
    assert [("late" in x) for x in threaded] == [False] * 11 + [True] * (N - 11)


def test_eight_threads_iterate_one_dataset(good):
    ds = _dataset(good, 2)
    expected = list(_dataset(good, 1))

    def work():
        _same_items(list(ds), expected)

    assert in_threads(work) == []
    assert not _decode_threads()


def _noted(item):
    return {**item, "decode_threads": len(_decode_threads())}


def test_a_forked_worker_with_cores_to_spare_decodes_on_threads(good, monkeypatch):
    """One DataLoader worker given 2 decode threads uses them (they end once
    the read has no more records for them: here fewer are held ahead than the
    file has); its batches equal the main process's."""
    _hold_ahead(monkeypatch, 16)  # the forked worker inherits it
    loader = DataLoader(_dataset(good, 2, transform=_noted), batch_size=16, num_workers=1)
    main = DataLoader(_dataset(good, 1), batch_size=16)
    batches = list(loader)
    assert all(int(n) >= 1 for n in batches[0]["decode_threads"])
    for b, m in zip(batches, main):
        assert torch.equal(b["image"], m["image"]) and torch.equal(b["label"], m["label"])


def test_the_source_of_a_bucket_read_keeps_its_order(good, tmp_path):
    """Through a shard cache (its fills and the decode threads at once): the same items."""
    from tfrecord_torch import ShardCache

    source = Source(cache=ShardCache(str(tmp_path / "cache")))
    _same_items(list(_dataset(good, 2, source=source)), list(_dataset(good, 1)))


def test_records_read_before_a_corrupt_one_come_out_before_its_error(tmp_path):
    """A record whose CRC fails is found by the read, records ahead of the
    decoding: the records of the groups read before it
    (one record a group here) still come out, in order, then its error, as
    with one thread."""
    path = _write(tmp_path / "crc.tfrecord")
    index = build_index(path, str(tmp_path / "crc.index"))  # built while the file was sound
    data = bytearray(Path(path).read_bytes())
    offset = 0
    for _ in range(50):  # the frames of records 0-49: length, its CRC, payload, its CRC
        offset += 12 + int.from_bytes(data[offset:offset + 8], "little") + 4
    data[offset + 12 + 20] ^= 0xFF  # a payload byte of record 50
    Path(path).write_bytes(bytes(data))

    def run(threads):
        got = []
        with pytest.raises(CorruptRecordError) as e:
            source = Source(index=[index], read_budget=ReadBudget(group=1024))
            for item in _dataset(path, threads, source=source):
                got.append(int(item["label"]))
        return got, _text(e.value)

    threaded, one = run(2), run(1)
    assert threaded == one and threaded[0] == list(range(50))
    assert "record 50" in threaded[1]


def test_the_records_held_ahead_are_bounded_by_their_bytes(good, monkeypatch):
    """At most ``AHEAD_BYTES`` of decoded records (here 10 images' worth) are
    decoded ahead of the one taken, once the first ones' size is known."""
    _hold_ahead(monkeypatch, 10)
    started = _counting_decodes(monkeypatch)
    ahead = []
    for taken, _ in enumerate(_dataset(good, 2), start=1):
        time.sleep(0.003)  # a slow loop: the threads decode as far ahead as they may
        ahead.append(len(started) - taken)
    assert 8 <= max(ahead[40:]) <= 11  # 10, and the one a thread may be starting as it is counted


@pytest.mark.parametrize("group_bytes, most", [(4 << 20, 32), (1, 1)])
def test_small_records_go_to_the_threads_in_groups(good, monkeypatch, group_bytes, most):
    """Each take from the read costs a decode thread a lock and the iterating
    thread a wake-up: once the records' size is known (one at a time until
    then), small records go in groups of up to GROUP_RECORDS (8 KB images
    here, 32 a group), large ones (over GROUP_BYTES) one at a time; the
    items are the same."""
    from tfrecord_torch.data import decodeahead

    monkeypatch.setattr(decodeahead, "GROUP_BYTES", group_bytes)
    sizes = []
    decode_all = decodeahead._decode_all

    def counted(decode, items, *args):
        sizes.append(len(items))  # list.append: one step, safe from the decode threads
        return decode_all(decode, items, *args)

    monkeypatch.setattr(decodeahead, "_decode_all", counted)
    _same_items(list(_dataset(good, 2)), list(_dataset(good, 1)))
    assert sum(sizes) == N and max(sizes) == most
    if most > 1:
        first = decodeahead.FIRST_AHEAD * 2  # read before the first record was taken
        assert len(sizes) <= first + (N - first) // most + 2


@pytest.mark.parametrize("threads, reader", [(2, "tfrecord_torch-readahead"), (1, "MainThread")])
def test_local_records_are_read_ahead_on_a_thread_where_they_decode_on_threads(good, tmp_path, monkeypatch, threads,
                                                                              reader):
    """With decode threads, a local file's records are read on the read-ahead
    thread, not in the loop's next() (where a group's read is a burst); with
    none (a DataLoader worker, one core), on the iterating thread."""
    from tfrecord_torch.data import recordmode

    readers = []
    fetch = recordmode.fetch_scattered

    def seen(*args):
        readers.append(threading.current_thread().name)
        return fetch(*args)

    monkeypatch.setattr(recordmode, "fetch_scattered", seen)
    index = build_index(good, str(tmp_path / "good.index"))
    source = Source(index=[index], read_budget=ReadBudget(group=16 << 10))  # a few records a read
    labels = [int(b["label"][0]) for b in DataLoader(_dataset(good, threads, source=source), batch_size=8)]
    assert labels == list(range(0, N, 8))
    assert len(readers) > 1 and set(readers) == {reader}
    assert not [t for t in threading.enumerate() if t.name.startswith("tfrecord")]  # joined


def test_decode_threads_start_after_a_burst_of_takes_not_during_it(good, monkeypatch):
    """A loop's next() takes a batch's records in a burst: the room it makes
    is decoded into SETTLE after the last take (once next() returned), not
    while the burst goes on, while more than half the records held ahead
    are left."""
    from tfrecord_torch.data import decodeahead

    _hold_ahead(monkeypatch, 40)
    monkeypatch.setattr(decodeahead, "SETTLE", 1.0)
    # One record a group: a take of the loop's then frees exactly one record
    # (with groups, 8 takes inside a group already taken free none).
    monkeypatch.setattr(decodeahead, "GROUP_RECORDS", 1)
    started = _counting_decodes(monkeypatch)
    it = iter(_dataset(good, 2))
    try:
        for _ in range(8):
            next(it)
        deadline = time.monotonic() + 10
        while len(started) < 8 + 38 and time.monotonic() < deadline:  # the window fills
            time.sleep(0.01)
        time.sleep(0.5)
        before = len(started)
        for _ in range(8):  # a burst: 8 of the ~40 held ahead
            next(it)
        time.sleep(0.1)
        assert len(started) == before  # settling: SETTLE (1 s) has not passed since the last take
        deadline = time.monotonic() + 10
        while len(started) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(started) > before  # and then they decode into the room
    finally:
        it.close()
    assert not _decode_threads()


def test_a_loop_waiting_for_records_is_not_kept_waiting_by_the_settle(good, monkeypatch):
    """A loop that takes every record as fast as they come waits for the
    decode threads, which then go at once: the settle (here 30 s) never holds
    them while the loop waits or fewer than half the records held ahead are left."""
    from tfrecord_torch.data import decodeahead

    _hold_ahead(monkeypatch, 16)
    monkeypatch.setattr(decodeahead, "SETTLE", 30.0)
    start = time.monotonic()
    got = list(_dataset(good, 2))
    assert time.monotonic() - start < 20  # one settle held would take 30 s
    _same_items(got, list(_dataset(good, 1)))


def test_an_iterator_left_open_does_not_hold_the_interpreters_exit(good, tmp_path):
    """The decode threads wait for room while an iterator is left open; at
    the interpreter's exit they must not hold it (as a pool's threads,
    joined at exit, would: forever)."""
    import subprocess
    import sys

    script = tmp_path / "left_open.py"
    script.write_text(
        "import torchvision  # noqa: F401\n"
        "from tfrecord_torch import Batching, Image, ImageBatching, Int64, TFRecordDataset\n"
        "from tfrecord_torch.data import decodeahead\n"
        f"decodeahead.AHEAD_BYTES = {16 * RECORD_BYTES}  # fewer than the records: the threads wait for room\n"
        f"ds = TFRecordDataset({good!r}, features={{'image': Image(), 'label': Int64()}},\n"
        "                     batching=Batching(images=ImageBatching(threads=2)))\n"
        "it = iter(ds)\n"
        "next(it)\n"
        "print('taken', flush=True)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "taken"
