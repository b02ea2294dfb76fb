"""Resume states: what a position means, and refusing one that means another thing.

A state says where a reader stands (``position``: units finished in the
epoch) and everything that decides which records those units were: the
epoch, the seed, the shard list (names and record counts), rank and world
size, the shuffle settings and the mode (batch size, ``even``). Loading a
state made under other settings would resume at the right number in the
wrong sequence -- records repeated or skipped silently -- so it is refused
with a ValueError naming each difference.
"""

from __future__ import annotations

import os
from typing import Any

import torch.utils.data

from tfrecord_torch.data.epochs import EpochCounter

__all__ = ["FORMAT", "ResumableReader", "check_position_known", "check_state", "describe_shards_for_state"]

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


class ResumableReader:
    """Epochs and resume states of :class:`~tfrecord_torch.TFRecordDataset`
    (its attributes: ``_epochs``, ``epoch``, ``_position``, ``_resume`` and the
    settings listed in :meth:`_settings`)."""

    _epochs: Any
    epoch: int
    _position: int
    _resume: dict | None
    paths: list[str]
    seed: int
    rank: int
    world_size: int
    shuffle: bool
    shuffle_block: int
    shuffle_buffer: int
    cycle_length: int
    batch_size: int | None
    drop_last: bool
    even: str | None

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration read ``epoch`` (and later ones ``epoch + 1``, ...).

        Not needed to reshuffle: each iteration already starts the next epoch.
        Call it before ``iter(loader)``; it reaches persistent workers too.
        """
        self._epochs.set(epoch)
        self.epoch = int(epoch)
        self._position = 0  # a state taken now means the start of ``epoch``

    def _settings(self) -> dict:
        info = torch.utils.data.get_worker_info()
        return {"seed": self.seed, "rank": self.rank, "world_size": self.world_size,
                "worker": [0, 1] if info is None else [info.id, info.num_workers],
                "shards": describe_shards_for_state(self.paths, self._counts()),
                "shuffle": {"shuffle": self.shuffle, "block": self.shuffle_block,
                            "buffer": self.shuffle_buffer, "cycle_length": self.cycle_length},
                "mode": {"batch_size": self.batch_size, "drop_last": self.drop_last, "even": self.even}}

    def _counts(self) -> list[int] | None:
        return getattr(self, "counts", None)

    def state_dict(self) -> dict:
        """Where iteration stands: the epoch, this reader's position in it, and
        the settings that give the position its meaning (format version, seed,
        shards with record counts, rank, world size, worker, shuffle, mode).

        The position counts the units (records, or batches in batch mode) this
        reader has finished, delivered or skipped by the error policy. Inside a
        DataLoader worker this is the worker's own state, which is what
        torchdata's StatefulDataLoader saves and restores per worker. After
        :meth:`load_state_dict` and before iterating, it is the loaded state.

        Raises:
            RuntimeError: called in the main process while a plain DataLoader's
                workers read the dataset (use StatefulDataLoader's state_dict).
        """
        check_position_known(self._epochs, type(self).__name__)
        position = self._position if self._resume is None else int(self._resume["position"])
        return {"format": FORMAT, "epoch": self.epoch, "position": position, **self._settings()}

    def load_state_dict(self, state: dict) -> None:
        """Resume: the next iteration reads the saved epoch from after the saved
        position (no :meth:`set_epoch` needed); nothing is repeated or skipped,
        and what came before is not read again (streamed shards are re-read but
        not decoded). Later iterations go on with the following epochs.

        Raises:
            ValueError: the state comes from another seed, shard list, rank,
                world size, worker split, shuffle setting or mode (named), or
                another format version.
        """
        state = check_state(state, self._settings(), what=type(self).__name__)
        self.epoch = int(state["epoch"])
        self._epochs.restore(self.epoch)
        self._resume = dict(state)

    def _take_resume(self) -> int:
        """The position a loaded state resumes from (0 if none), once.

        Raises:
            ValueError: the state was loaded in another reader than the one
                iterating (the main process's, read by DataLoader workers):
                its position counts another split of the epoch.
        """
        if self._resume is None:
            return 0
        state, self._resume = self._resume, None
        here = self._settings()["worker"]
        if _worker_of(state) != here:
            raise ValueError(
                f"{type(self).__name__}: a state saved as reader {_worker_of(state)} (worker, workers) cannot "
                f"resume in DataLoader worker {here}: each worker reads its own share of the epoch. Resume "
                "through torchdata's StatefulDataLoader (loader.load_state_dict), which gives each worker its "
                "own state, or iterate with num_workers=0")
        return int(state["position"])
