"""Many byte ranges read together: which requests cover them, and that the
bytes come back in the order asked, for a local file and a URL (fsspec's
memory filesystem)."""

import threading

import fsspec
import numpy as np
import pytest

from tfrecord_torch.io import ranges
from tfrecord_torch.io.budget import ReadBudget, RequestBudget
from tfrecord_torch.io.filling import FillView
from tfrecord_torch.io.pool import Reader
from tfrecord_torch.io.ranges import Request, iter_ranges, plan_requests, read_many, read_ranges


def test_requests_join_adjacent_and_near_ranges_up_to_the_longest():
    assert plan_requests([0, 10, 25], [10, 10, 5], gap=0, longest=100) == [Request(0, 20, 0, 2),
                                                                           Request(25, 30, 2, 3)]
    assert plan_requests([0, 10, 25], [10, 10, 5], gap=5, longest=100) == [Request(0, 30, 0, 3)]
    assert plan_requests([0, 10, 20], [10, 10, 10], gap=0, longest=20) == [Request(0, 20, 0, 2),
                                                                           Request(20, 30, 2, 3)]
    assert plan_requests([0], [50], gap=0, longest=20) == [Request(0, 50, 0, 1)]  # a long range: alone
    assert plan_requests([20, 0], [10, 10], gap=100, longest=100) == [Request(20, 30, 0, 1),
                                                                      Request(0, 10, 1, 2)]  # never back
    assert plan_requests([], [], gap=0, longest=1) == []


def test_a_ratio_keeps_far_small_ranges_apart_and_near_large_ones_joined():
    # 10-byte ranges 90 bytes apart: joined, a request reads 10 times what it uses; with ratio 4, one each
    assert len(plan_requests([0, 100, 200], [10, 10, 10], gap=1000, longest=1000)) == 1
    assert plan_requests([0, 100, 200], [10, 10, 10], gap=1000, longest=1000, ratio=4) == [
        Request(0, 10, 0, 1), Request(100, 110, 1, 2), Request(200, 210, 2, 3)]
    # 100-byte ranges 100 bytes apart: twice what they use, still one request
    assert plan_requests([0, 200, 400], [100, 100, 100], gap=1000, longest=1000, ratio=4) == [
        Request(0, 500, 0, 3)]


@pytest.fixture(params=["local", "url"])
def stored(request, tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    if request.param == "local":
        path = tmp_path / "blob"
        path.write_bytes(data)
        return str(path), data
    url = f"memory://ranges/{tmp_path.name}/blob"
    with fsspec.open(url, "wb") as f:
        f.write(data)
    return url, data


@pytest.mark.parametrize("gap", [0, 1000])
def test_bytes_come_back_in_the_order_asked(stored, monkeypatch, gap):
    path, data = stored
    budget = ReadBudget(requests=RequestBudget(gap=gap, longest=64 << 10))
    monkeypatch.setattr(ranges, "IN_FLIGHT", 3)
    rng = np.random.default_rng(1)
    offsets = sorted(rng.choice(len(data) - 5000, 300, replace=False).tolist())
    sizes = rng.integers(0, 4000, 300).tolist()
    sizes[-1] = 10_000  # past the end of the file for the last one
    offsets[-1] = len(data) - 100
    reader = Reader(path, budget=budget)
    expected = [data[o:o + s] for o, s in zip(offsets, sizes)]
    assert list(iter_ranges(reader, offsets, sizes)) == expected
    shuffled = rng.permutation(300).tolist()
    asked = ([offsets[i] for i in shuffled], [sizes[i] for i in shuffled])
    assert read_ranges(reader, *asked) == [expected[i] for i in shuffled]
    assert read_many([(reader, *asked), (Reader(path, budget=budget), offsets[:5], sizes[:5])]) == \
        [[expected[i] for i in shuffled], expected[:5]]


def test_an_iterator_closed_early_stops_reading(stored):
    path, data = stored
    offsets = list(range(0, 100_000, 1000))
    got = iter_ranges(Reader(path, budget=ReadBudget(requests=RequestBudget(longest=1000))), offsets,
                      [1000] * len(offsets))
    assert next(got) == data[:1000]
    got.close()


def test_ranges_read_together_stay_right_when_a_fill_is_given_up_meanwhile(tmp_path):
    """Two URLs read together, each through a copy being filled (the first
    reads of an iteration: ``far`` given). The second's fill is given up
    (no fill file, no copy, no lock: its view says "read the bucket") while
    the first's bytes are still coming: each range still gets its own bytes."""
    data = np.random.default_rng(2).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    urls = []
    for name in ("a", "b"):
        url = f"memory://ranges/{tmp_path.name}/{name}"
        with fsspec.open(url, "wb") as f:
            f.write(data)
        urls.append(url)
    given_up = threading.Event()

    class Late(Reader):  # its bytes arrive once the other reader has turned to the bucket
        def read(self, *args, **kwargs):
            given_up.wait(10)
            return super().read(*args, **kwargs)

    class GivenUp(Reader):
        def read(self, *args, **kwargs):
            try:
                return super().read(*args, **kwargs)
            finally:
                given_up.set()

    readers = [Late(urls[0]), GivenUp(urls[1])]
    for k, reader in enumerate(readers):
        reader._open()
        reader._view = FillView(str(tmp_path / f"entry{k}"), len(data), pending=lambda: False)
    # small records far apart: joined while filling, apart (MERGE_RATIO) once read from the bucket
    offsets = list(range(0, 200_000, 10_000))
    sizes = [100] * len(offsets)
    got = read_many([(reader, offsets, sizes) for reader in readers], far=1 << 20)
    expected = [data[o:o + s] for o, s in zip(offsets, sizes)]
    assert got == [expected, expected]


@pytest.mark.parametrize("end", ["error", "close"])
def test_no_read_of_a_reader_runs_after_its_iterator_ended(tmp_path, end):
    """A reader goes back to its pool when the iterator over its ranges ends;
    a read still running then could close or reopen its descriptor under the
    next borrower. An iterator that raises (a read failed) or is closed
    (a ``break``) returns only once the reads it started have ended."""
    url = f"memory://ranges/{tmp_path.name}/late"
    with fsspec.open(url, "wb") as f:
        f.write(bytes(4000))
    started, release = threading.Event(), threading.Event()
    running: list[int] = []

    class Slow(Reader):  # the first read fails (or is taken), the second is slow
        def read(self, offset, size, *args, **kwargs):
            if offset == 0:
                started.wait(10)
                if end == "error":
                    raise OSError("the first read failed")
                return super().read(offset, size, *args, **kwargs)
            running.append(offset)
            started.set()
            release.wait(0.5)  # long enough for an iterator that does not wait to return first
            running.remove(offset)
            return super().read(offset, size, *args, **kwargs)

    got = iter_ranges(Slow(url), [0, 2000], [1000, 1000], join=False)
    if end == "error":
        with pytest.raises(OSError, match="the first read failed"):
            next(got)
    else:
        assert next(got) == bytes(1000)
        got.close()
    assert running == []
