"""Read-ahead on a background thread: the source's order, errors where they
were raised, a bounded number of items ahead, and no thread left behind."""

import gc
import threading

import pytest

from tfrecord_torch.data.readahead import ReadAhead, fetch_ahead


def threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tfrecord_torch-readahead"]


class Source:
    """Items 0, 1, 2, ... (``count`` of them, or endless), counting how many
    were made beyond those the consumer took."""

    def __init__(self, count=None, fail_at=None):
        self.count, self.fail_at = count, fail_at
        self.made = self.taken = self.most_ahead = 0
        self.closed = False

    def __iter__(self):
        try:
            i = 0
            while self.count is None or i < self.count:
                if i == self.fail_at:
                    raise ValueError(f"item {i} failed")
                self.made += 1
                self.most_ahead = max(self.most_ahead, self.made - self.taken)
                yield i
                i += 1
        finally:
            self.closed = True


def test_items_come_in_order_and_memory_stays_bounded():
    source = Source(200)
    got = []
    for item in ReadAhead(iter(source), weight=lambda _: 10, limit=30):
        got.append(item)
        source.taken += 1
    assert got == list(range(200))
    assert source.most_ahead <= 30 // 10 + 1  # under the limit with the consumer's item, and one more


def test_an_item_over_the_limit_is_not_fetched_while_another_is_held():
    source = Source(20)
    for _ in ReadAhead(iter(source), weight=lambda _: 100, limit=30):
        source.taken += 1
    assert source.most_ahead <= 1  # the next item is fetched only once the consumer asks for it
    assert source.closed and not threads()


def test_an_error_comes_after_the_items_before_it():
    ahead = ReadAhead(iter(Source(10, fail_at=4)), weight=lambda _: 1, limit=64 << 20)
    assert [next(ahead) for _ in range(4)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="item 4 failed"):
        next(ahead)
    assert list(ahead) == [] and not threads()


def test_closing_or_dropping_the_iterator_stops_the_thread():
    source = Source()
    ahead = ReadAhead(iter(source), weight=lambda _: 1, limit=4)
    assert next(ahead) == 0
    ahead.close()
    assert source.closed and not threads()
    dropped = Source()
    ahead = ReadAhead(iter(dropped), weight=lambda _: 1, limit=4)
    assert next(ahead) == 0
    (thread,) = threads()
    del ahead
    gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive() and dropped.closed


def test_fetch_ahead_fetches_local_units_in_the_consumers_thread_and_remote_ones_ahead():
    where: dict[int, str] = {}

    def fetch(unit: int) -> int:
        where[unit] = threading.current_thread().name
        if unit == 8:
            raise OSError("unit 8")
        return unit * 10

    units = [0, 1, 2, 3, 4, 5, 6, 7, 8]
    remote = {2, 3, 6}.__contains__
    got = []
    with pytest.raises(OSError, match="unit 8"):
        for item in fetch_ahead(iter(units), fetch, remote=remote, weight=lambda x: 1, limit=64 << 20):
            got.append(item)
    assert got == [u * 10 for u in units[:-1]]  # in order, the error in its place
    me = threading.current_thread().name
    assert {u for u, name in where.items() if name == me} == {0, 1, 4, 5, 7, 8}
    assert {u for u, name in where.items() if name == "tfrecord_torch-readahead"} == {2, 3, 6}
    assert not [t for t in threading.enumerate() if t.name == "tfrecord_torch-readahead"]
