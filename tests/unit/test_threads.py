"""The one producer loop (:class:`tfrecord_torch._threads.Producer`): bounded
by a count or by bytes, the items and the source's error in order, and a
close from anywhere (another thread, while the consumer waits, while the
producer waits for room or is mid-item) that ends and joins its thread; the
pool of one block of work (:class:`tfrecord_torch._threads.OwnedPool` as
a context manager), which the scoped pools of the package use; and the team
of loops (:class:`tfrecord_torch._threads.Team`) the decode threads run on,
stopped and joined by its owner, from one of its own threads without a
join."""

from __future__ import annotations

import gc
import threading
import time

import pytest

from tfrecord_torch._threads import OwnedPool, Producer, Team

NAME = "tfrecord_torch-test-producer"


def producers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == NAME]


class Counted:
    """A source of 0, 1, ... that notes how many items were asked of it and
    where it was closed; ``block`` holds every ``next()`` until set."""

    def __init__(self, n: int = 1000, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.asked, self.closed_on = n, fail_at, 0, None
        self.cond = threading.Condition()
        self.block = threading.Event()
        self.block.set()
        self.entered = threading.Event()

    def __iter__(self):
        return self

    def __next__(self) -> int:
        self.entered.set()
        assert self.block.wait(30)
        with self.cond:
            if self.asked == self.fail_at:
                raise KeyError(f"item {self.asked}")
            if self.asked >= self.n:
                raise StopIteration
            self.asked += 1
            self.cond.notify_all()
            return self.asked - 1

    def wait_asked(self, k: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.asked >= k, 30)

    def close(self) -> None:
        self.closed_on = threading.current_thread().name


def settle(source: Counted, k: int) -> None:
    """Give the thread the chance to ask for more than ``k`` items (it must not)."""
    source.wait_asked(k)
    for _ in range(50):
        threading.Event().wait(0.002)
    assert source.asked == k


def test_the_items_come_in_order_and_the_thread_ends_with_them():
    source = Counted(50)
    producer = Producer(source, name=NAME, limit=3)
    assert list(producer) == list(range(50))
    assert source.closed_on == NAME and not producers()


def test_a_count_bound_holds_the_items_ahead_to_it():
    source = Counted()
    producer = Producer(source, name=NAME, limit=3).start()
    settle(source, 3)  # three ahead, none taken
    assert next(producer) == 0
    settle(source, 3)  # the one taken still counts until it is let go
    producer.taken()
    settle(source, 4)  # let go: its room is free
    assert next(producer) == 1 and next(producer) == 2
    settle(source, 5)  # taking the next lets the one before go
    producer.close()
    assert not producers()


def test_a_byte_bound_holds_the_bytes_ahead_under_it_plus_one_item():
    source = Counted()
    producer = Producer(source, name=NAME, limit=10, weight=lambda i: 4).start()
    settle(source, 3)  # 0, 4, 8 bytes held: a third item may pass the bound, a fourth not
    assert [next(producer), next(producer)] == [0, 1]
    settle(source, 4)  # the first let go; the second still held
    producer.close()


def test_an_error_comes_after_the_items_before_it_and_ends_the_thread():
    source = Counted(fail_at=4)
    producer = Producer(source, name=NAME, limit=2)
    got = []
    with pytest.raises(KeyError, match="item 4"):
        for item in producer:
            got.append(item)
    assert got == [0, 1, 2, 3]
    assert source.closed_on == NAME and not producers()
    assert list(producer) == []  # ended


def test_close_from_another_thread_while_the_consumer_waits():
    source = Counted()
    source.block.clear()
    producer = Producer(source, name=NAME, limit=2)
    got: list = []
    consumer = threading.Thread(target=lambda: got.extend(producer))
    consumer.start()
    assert source.entered.wait(30)  # the producer is mid-item, the consumer waits for it
    closer = threading.Thread(target=producer.close)
    closer.start()
    source.block.set()  # the item in progress ends; the thread stops after it
    closer.join(30)
    consumer.join(30)
    assert not closer.is_alive() and not consumer.is_alive()
    assert not producers() and source.closed_on == NAME


def test_close_while_the_producer_waits_for_room():
    source = Counted()
    producer = Producer(source, name=NAME, limit=1).start()
    settle(source, 1)
    producer.close()
    assert not producers() and source.closed_on == NAME


def test_a_settling_producer_waits_after_room_is_made_but_not_for_a_waiting_consumer():
    # made room inside the consumer's call (a DataLoader's next()), the thread's work would take the
    # GIL from the rest of that call: it waits `settle` first, unless the consumer already waits
    source = Counted()
    producer = Producer(source, name=NAME, limit=1, settle=60.0).start()
    settle(source, 1)
    assert next(producer) == 0
    producer.taken()
    settle(source, 1)  # room, but within the settle: nothing asked (a plain producer asks at once)
    assert next(producer) == 1  # the consumer waits for an item: the thread goes at once
    producer.close()  # mid-settle again after the take made room: stopping ends the wait
    assert not producers() and source.closed_on == NAME


def test_a_settling_producer_goes_on_once_the_settle_has_passed():
    source = Counted()
    producer = Producer(source, name=NAME, limit=1, settle=0.05).start()
    assert next(producer) == 0
    producer.taken()
    source.wait_asked(2)  # 50 ms later, with the consumer not waiting
    producer.close()


def test_a_producer_never_started_closes_its_source_here():
    source = Counted()
    Producer(source, name=NAME, limit=1).close()
    assert source.asked == 0 and source.closed_on == threading.current_thread().name


def test_a_dropped_producer_stops_its_thread():
    source = Counted()
    producer = Producer(source, name=NAME, limit=1)
    assert next(producer) == 0
    thread = next(t for t in producers())
    del producer
    gc.collect()
    thread.join(30)
    assert not thread.is_alive() and source.closed_on == NAME


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="limit"):
        Producer(iter(()), name=NAME, limit=0)


def _alive(prefix):
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix + "_")]


def test_a_scoped_pool_maps_in_order_and_joins_its_threads_at_the_blocks_end():
    with OwnedPool(3, "tfrecord_torch-test-map") as pool:
        got = list(pool.map(lambda x: (x * x, threading.current_thread().name), range(12)))
        assert _alive("tfrecord_torch-test-map")
    assert [square for square, _ in got] == [x * x for x in range(12)]
    assert {name.rsplit("_", 1)[0] for _, name in got} == {"tfrecord_torch-test-map"}
    assert not _alive("tfrecord_torch-test-map")


def test_a_scoped_pools_error_comes_in_its_turn_the_rest_cancelled_and_the_threads_joined():
    begun = []

    def work(x):
        begun.append(x)
        if x == 0:
            raise ValueError("item 0")
        time.sleep(0.01)
        return x

    with pytest.raises(ValueError, match="item 0"):
        with OwnedPool(1, "tfrecord_torch-test-error") as pool:
            list(pool.map(work, range(50)))
    assert begun[0] == 0 and len(begun) < 50  # one thread: the items after the error's were cancelled
    assert not _alive("tfrecord_torch-test-error")


def test_the_shard_cache_version_check_runs_on_a_joined_thread(monkeypatch):
    from tfrecord_torch.io import shardcache

    seen = []
    monkeypatch.setattr(shardcache, "_check_unchanged", lambda *a: seen.append(threading.current_thread().name))
    check = shardcache._CheckSoon("s3://b/k", 1, "v", None, "before copying it")
    check.result()
    assert seen and seen[0].startswith("tfrecord_torch-copy-check_")
    assert not _alive("tfrecord_torch-copy-check")

    def changed(*a):
        raise shardcache.RemoteError("s3://b/k", "changed")

    monkeypatch.setattr(shardcache, "_check_unchanged", changed)
    with pytest.raises(shardcache.RemoteError, match="changed"):
        shardcache._CheckSoon("s3://b/k", 1, "v", None, "before copying it").result()
    assert not _alive("tfrecord_torch-copy-check")


class _Loop:
    """State a team's threads loop on until stopped. ``closer``: the thread
    that closes the team while it holds ``gate``, which the others wait for
    (a finalizer run on a team thread in the middle of its work)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.gate = threading.Lock()
        self.holding = threading.Event()  # the closer holds the gate
        self.stopped = False
        self.ran: list[str] = []
        self.team: Team | None = None
        self.closer: str | None = None

    def run(self) -> None:
        name = threading.current_thread().name
        with self.cond:
            self.ran.append(name)
            self.cond.notify_all()
        if name == self.closer:
            with self.gate:
                self.holding.set()
                time.sleep(0.05)  # the other thread waits for the gate
                self.team.close()  # stops the others and joins none: one waits for this thread's gate
        elif self.closer is not None:
            assert self.holding.wait(30)
            with self.gate:
                pass
        with self.cond:
            while not self.stopped:
                self.cond.wait()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def wait_ran(self, k: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.ran) >= k, 30)


def test_a_team_runs_its_loop_on_each_thread_and_close_stops_and_joins_them():
    loop = _Loop()
    team = Team(3, "tfrecord_torch-test-team", loop.run, loop.stop).start()
    loop.wait_ran(3)
    threads = [t for t in threading.enumerate() if t.name.startswith("tfrecord_torch-test-team_")]
    assert sorted(loop.ran) == [f"tfrecord_torch-test-team_{k}" for k in range(3)]
    assert len(threads) == 3 and all(t.daemon for t in threads)  # an owner that never closes does not hold the exit
    team.close()
    assert loop.stopped and not _alive("tfrecord_torch-test-team")


def test_a_team_closed_from_one_of_its_threads_stops_them_and_waits_for_none():
    """A finalizer can run on any thread: a close from a team thread must
    not join (it would wait for itself, or for a thread waiting on it)."""
    loop = _Loop()
    loop.closer = "tfrecord_torch-test-team-self_1"
    loop.team = Team(2, "tfrecord_torch-test-team-self", loop.run, loop.stop)
    loop.team.start()
    for _ in range(1000):
        if not _alive("tfrecord_torch-test-team-self"):
            break
        time.sleep(0.01)
    assert loop.stopped and not _alive("tfrecord_torch-test-team-self")
