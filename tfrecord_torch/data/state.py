"""Resume states: what a position means, and refusing one that means another thing.

A state says where a reader stands (``position``: units finished in the
epoch) and everything that decides which records those units were: the
epoch, the seed, the shard list (names and record counts), rank and world
size, the shuffle settings and the mode (batch size, ``even``). Loading a
state made under other settings would resume at the right number in the
wrong sequence -- records repeated or skipped silently -- so it is refused
with a ValueError naming each difference. The exception is the layout (rank,
world size, DataLoader workers, mode): a state from another layout resumes
its epoch from what the whole job consumed (:mod:`tfrecord_torch.data.elastic`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import torch.utils.data

from tfrecord_torch.data import elastic
from tfrecord_torch.data.epochs import EpochCounter
from tfrecord_torch.data.reading import SKIPPED
from tfrecord_torch.data.workersend import sent, settle

if TYPE_CHECKING:
    from tfrecord_torch.data.counts import SharedErrorPolicy

__all__ = ["FORMAT", "ResumeState", "check_position_known", "check_state", "describe_shards_for_state"]

FORMAT = 1  # bump when the meaning of a position changes


def check_position_known(epochs: EpochCounter, what: str) -> None:
    """Raise if DataLoader workers, not this process, are reading the dataset.

    Each worker reads from its own copy, so the main process's copy stays at
    the position it had (0); a state made from it would replay the epoch.

    Args:
        epochs: the dataset's :class:`~tfrecord_torch.data.epochs.EpochCounter`.
        what: the dataset's class name, for the message.

    Raises:
        RuntimeError: the latest iteration ran in DataLoader workers.
    """
    if epochs.read_in_workers():
        raise RuntimeError(
            f"{what}.state_dict(): the dataset is being read in DataLoader worker processes, each from its "
            "own copy, so this process cannot know the position (its copy never moved). Save and resume "
            "through torchdata's StatefulDataLoader, which collects each worker's state: "
            "`from torchdata.stateful_dataloader import StatefulDataLoader`; "
            "`loader = StatefulDataLoader(ds, num_workers=..., batch_size=...)`; save `loader.state_dict()` "
            "and resume with `loader.load_state_dict(state)` on a new loader over the same dataset. "
            "(With num_workers=0, `ds.state_dict()` works as it is.)")


def _worker_of(state: dict) -> list:
    return list(state.get("worker") or [0, 1])


def describe_shards_for_state(paths: list[str], counts: list[int] | None) -> list[list[Any]]:
    """``[[name, records], ...]``: shard file names (not folders, so a moved
    copy resumes) with their record counts (None when streamed)."""
    names = [os.path.basename(p.rstrip("/")) or p for p in paths]
    sizes: list[int | None] = [None] * len(names) if counts is None else [int(c) for c in counts]
    return [[n, c] for n, c in zip(names, sizes)]


def check_state(state: Any, expected: dict, *, what: str) -> dict:
    """Check a loaded ``state`` against this dataset's ``expected`` settings.

    Args:
        state: the dict from ``state_dict()``.
        expected: the keys that must match, with this dataset's values.
        what: the dataset's class name, for messages.

    Returns:
        The state as a dict.

    Raises:
        ValueError: not a state dict, another format version, or settings that
            differ (each difference named, with both values).
    """
    if not isinstance(state, dict) or "position" not in state or "epoch" not in state:
        raise ValueError(f"{what}.load_state_dict: expected a dict from state_dict(), got {state!r:.200}")
    version = state.get("format")
    if version != FORMAT:
        raise ValueError(f"{what}.load_state_dict: state format {version!r}, this version reads format {FORMAT} "
                         "(states from before format 1 lack the settings needed to resume safely)")
    diffs = []
    for key, mine in expected.items():
        theirs = state.get(key)
        if _normal(theirs) != _normal(mine):
            if key == "shards":
                diffs.append(_shard_difference(theirs, mine))
            else:
                diffs.append(f"{key}: state has {theirs!r}, dataset has {mine!r}")
    if diffs:
        raise ValueError(f"{what}.load_state_dict: the state comes from a different dataset or setup; "
                         + "; ".join(diffs))
    if not isinstance(state["position"], int) or state["position"] < 0:
        raise ValueError(f"{what}.load_state_dict: position must be an int >= 0, got {state['position']!r}")
    return state


def _normal(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _shard_difference(theirs: Any, mine: list) -> str:
    if not isinstance(theirs, list):
        return f"shards: state has {theirs!r:.100}, dataset has {len(mine)} shards"
    if len(theirs) != len(mine):
        return f"shards: state has {len(theirs)} shards, dataset has {len(mine)}"
    for i, (a, b) in enumerate(zip(theirs, mine)):
        if _normal(a) != _normal(b):
            return f"shards[{i}]: state has {a!r} (name, records), dataset has {b!r}"
    return "shards differ"


class ResumeState:
    """Where a reader stands: the epoch, its position in it (units finished),
    and a loaded state not yet resumed from. Owned by
    :class:`~tfrecord_torch.TFRecordDataset`, which passes the settings that
    give a position its meaning (:func:`check_state`) to each call.

    An epoch resumed under another layout reads only the positions of the
    epoch's sequence outside ``consumed`` (intervals); its positions count
    units of that shorter sequence.

    Args:
        what: the owner's class name, for messages.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.epochs = EpochCounter()  # iterations so far, shared with DataLoader workers
        self.epoch = 0  # the epoch of the current (or next) iteration
        self.position = 0
        self.consumed: list[list[int]] = []  # read before this iteration (a resumed epoch)
        self.loaded: dict | None = None  # a state for this reader (its position counts)
        self.spread: _Spread | None = None  # what a whole job consumed, for any reader
        self.total = 0  # the epoch's records, when a state was loaded
        self.settings: dict = {}  # the dataset's, when a state was loaded

    @property
    def current(self) -> int:
        """:attr:`epoch`; in the main process while DataLoader workers read
        (:meth:`~tfrecord_torch.data.epochs.EpochCounter.read_in_workers`),
        the epoch of their latest iteration, which this process does not start."""
        return self.epochs.latest() if self.epochs.read_in_workers() else self.epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration read ``epoch`` (and later ones ``epoch + 1``, ...)."""
        self.epochs.set(epoch)
        self.epoch = int(epoch)
        self.position = 0  # a state taken now means the start of ``epoch``
        self.consumed = []  # (a loaded state stays: it resumes if ``epoch`` is its epoch)

    def start(self, worker: list[int]) -> int:
        """Start an iteration in reader ``worker`` ([worker, workers]): its
        epoch becomes current; returns the position it resumes from (0 unless
        a state was loaded) and sets :attr:`consumed`."""
        self.epoch = self.epochs.start()
        self.position = self._take(worker)
        return self.position

    def deliver(self, units: Iterable[tuple[int, Any]], policy: SharedErrorPolicy, *, records: bool, where: str
                ) -> Iterator:
        """The values of ``units`` ((units finished so far, the value or
        SKIPPED)), the position moved as each is taken; ``records``: each
        unit is one record, told to ``policy`` as delivered when it skips
        (batch mode counts in its pipeline); ``where``: the reader, for the
        line the policy logs at the end."""
        counted = records and not policy.raises
        source = iter(units)
        while True:
            settle()  # in a worker, after a batch went out: the queue's feeder thread first (workersend)
            try:
                position, value = next(source)
            except StopIteration:
                break
            self.position = position
            if value is not SKIPPED:
                if counted:
                    policy.delivered()
                yield value
                if not records:
                    sent()  # batch mode: the value was a batch, which torch has put in its queue
        policy.end(where)  # a spec error skipped in every record raises; else one line if any was skipped

    def state_dict(self, settings: dict) -> dict:
        """The state: format, epoch, position, ``settings`` and, in a resumed
        epoch, ``consumed``.

        Raises:
            RuntimeError: DataLoader workers, not this process, hold the position.
        """
        check_position_known(self.epochs, self.what)
        position, consumed = self.position, self.consumed
        if self.loaded is not None:
            position, consumed = int(self.loaded["position"]), self.loaded.get("consumed") or []
        elif self.spread is not None:
            position, consumed = 0, self.spread.consumed
        state = {"format": FORMAT, "epoch": self.epoch, "position": position, **settings}
        if consumed:
            state["consumed"] = consumed
        return state

    def load_state_dict(self, state: Any, settings: dict, total: int) -> None:
        """Keep ``state`` (checked against ``settings``) for the next iteration.

        A state from another layout (rank, world size, workers, mode) -- a
        dataset's or a whole StatefulDataLoader's -- becomes what its job
        consumed (:func:`~tfrecord_torch.data.elastic.progress`), which any
        reader of the new layout resumes from.

        Args:
            state: a ``state_dict()`` of the dataset or of a StatefulDataLoader over it.
            settings: this dataset's settings.
            total: the epoch's records (0 if unknown).

        Raises:
            ValueError: the state was made under other settings (named), or
                under another layout it cannot be carried to (saying why).
        """
        self.total, self.settings = total, settings
        states = elastic.reader_states(state, self.what)
        head = states[0]
        if len(states) == 1 and all(_normal(head.get(k)) == _normal(settings[k]) for k in elastic.LAYOUT):
            head = check_state(head, settings, what=self.what)
            if total:
                elastic.check_consumed(head.get("consumed") or [], total, self.what)
            self.epoch = int(head["epoch"])
            self.epochs.restore(self.epoch)
            self.loaded, self.spread = dict(head), None
            return
        if torch.utils.data.get_worker_info() is not None:  # one worker's state: the others' are elsewhere
            raise ValueError(
                f"{self.what}.load_state_dict: a DataLoader worker got a state saved under another layout "
                f"(reader {_worker_of(head)} of rank {head.get('rank')!r}/{head.get('world_size')!r}); it holds "
                "one worker's position, not what the whole job read. To resume with another num_workers, call "
                "`ds.load_state_dict(old_loader.state_dict())` on the dataset and build a new StatefulDataLoader "
                "over it without calling its load_state_dict")
        for one in states:
            check_state(one, {k: v for k, v in settings.items() if k not in elastic.LAYOUT}, what=self.what)
        elastic.check_settings(head, settings, self.what)
        consumed = elastic.progress(states, total, self.what)
        self.epoch = int(head["epoch"])
        self.epochs.set(self.epoch)  # every reader of the new layout starts this epoch
        self.loaded, self.spread = None, _Spread(self.epoch, consumed)

    def _take(self, here: list[int]) -> int:
        """The position a loaded state resumes from (0 if none), once; sets
        :attr:`consumed` for the iteration.

        Raises:
            ValueError: the state was loaded in another reader than the one
                iterating (the main process's, read by DataLoader workers) and
                cannot be carried to this one.
        """
        self.consumed = []
        state, self.loaded = self.loaded, None
        spread, self.spread = self.spread, None
        if state is not None and _worker_of(state) == here:
            self.consumed = list(state.get("consumed") or [])
            return int(state["position"])
        if state is not None and self.epoch == int(state["epoch"]):
            spread = self._spread_of(state, here)
        if spread is not None and spread.epoch == self.epoch:
            self.consumed = spread.consumed
        return 0

    def _spread_of(self, state: dict, here: list[int]) -> _Spread:
        """What the job of a reader's ``state`` consumed, for DataLoader
        worker ``here`` (a state loaded in the main process, read in workers)."""
        try:
            elastic.check_settings(state, self.settings, self.what)
            return _Spread(int(state["epoch"]), elastic.progress([state], self.total, self.what))
        except ValueError as e:
            raise ValueError(
                f"{self.what}: a state saved as reader {_worker_of(state)} (worker, workers) cannot "
                f"resume in DataLoader worker {here}: each worker reads its own share of the epoch ({e}). Resume "
                "through torchdata's StatefulDataLoader (loader.load_state_dict), which gives each worker its "
                "own state, or iterate with num_workers=0") from None


class _Spread(NamedTuple):
    """What a whole job consumed of ``epoch``: intervals of its sequence."""

    epoch: int
    consumed: list[list[int]]
