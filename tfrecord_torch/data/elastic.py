"""Elastic resume: an epoch's progress as positions of its sequence, so another layout can finish it.

A plan (:mod:`tfrecord_torch.data.plan`) cuts the epoch's record sequence
into one contiguous range per rank, then per DataLoader worker, and each
reader consumes a prefix of its range. A training job steps its ranks in
lockstep, so after k steps every rank's loader has delivered k batches: one
rank's state -- the position of each of its workers -- tells what every
reader of the job consumed. Their union, kept as sorted ``[start, stop)``
intervals of positions, is the epoch's progress whatever the layout (the
one number mosaicml streaming keeps, ``sample_in_epoch``, generalised to
readers that each own a range).

A resumed epoch reads the positions not in it, in sequence order, cut over
the new ranks and workers exactly as a normal epoch cuts all positions; the
epoch after it is a normal epoch. Positions, not records, are counted, so the
resumed run may also use another batch size or ``even`` mode.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tfrecord_torch.data import plan

__all__ = ["LAYOUT", "check_consumed", "check_settings", "progress", "reader_states", "remaining"]

LAYOUT = ("rank", "world_size", "worker", "mode")  # the settings a resume may change

_LOADER_HINT = ("pass the whole `loader.state_dict()` of a torchdata StatefulDataLoader (it holds every worker's "
                "state) to `ds.load_state_dict(...)` before building the new loader")


def reader_states(state: Any, what: str) -> list[dict]:
    """One rank's reader states in worker order, from a dataset's
    ``state_dict()`` (one reader) or a torchdata StatefulDataLoader's
    (each of its workers', or the dataset's with ``num_workers=0``).

    Raises:
        ValueError: not a state, or a loader state taken between snapshots.
    """
    if isinstance(state, dict) and "_snapshot" in state:
        if state.get("_steps_since_snapshot"):
            raise ValueError(f"{what}.load_state_dict: the loader state was taken "
                             f"{state['_steps_since_snapshot']} steps after its last snapshot, so its workers' "
                             "positions are not the ones delivered; build the StatefulDataLoader with "
                             "snapshot_every_n_steps=1 (the default) to resume under another layout")
        workers = state["_snapshot"].get("_worker_snapshots") or {}
        states = [(workers.get(f"worker_{i}") or {}).get("dataset_state") for i in range(len(workers))]
    elif isinstance(state, dict) and "dataset_state" in state and "position" not in state:
        states = [state["dataset_state"]]
    else:
        states = [state]
    found = [s for s in states if isinstance(s, dict) and "position" in s]
    if not found or len(found) != len(states):
        raise ValueError(f"{what}.load_state_dict: expected a dict from state_dict() or a StatefulDataLoader's "
                         f"state_dict(), got {state!r:.200}")
    return found


def check_settings(head: dict, settings: dict, what: str) -> None:
    """Refuse to resume the state ``head`` (one reader's) under another layout
    with this dataset's ``settings`` where positions do not say which records
    were read.

    Raises:
        ValueError: saying what to do instead.
    """
    same = "resume with the same world size and num_workers (and batch size), or start the epoch again"
    if any(count is None for _, count in settings["shards"]):
        raise ValueError(f"{what}.load_state_dict: some shards are streamed (compressed, or in epoch 0 remote "
                         "shards without index objects) and dealt whole to readers, so a position counts records "
                         f"of the reader's own shards; {same}, or decompress (or index) the shards")
    shuffle = settings["shuffle"]
    if shuffle["shuffle"] and shuffle["block"] > 1:
        raise ValueError(f"{what}.load_state_dict: a block shuffle (Shuffling(block={shuffle['block']})) mixes "
                         f"records inside each reader's range, so positions differ by layout; {same}")
    if shuffle["shuffle"] and shuffle["buffer"] > 1 and head["mode"].get("batch_size") is None:
        raise ValueError(f"{what}.load_state_dict: a shuffle buffer (Shuffling(buffer={shuffle['buffer']})) "
                         f"reorders each reader's records, so a position is not a prefix of its range; {same}")
    if settings["mode"].get("even") == "pad":
        raise ValueError(f"{what}.load_state_dict: even='pad' repeats records to fill the ranks, which a resumed "
                         "epoch cannot do without reading them twice; resume with even=None or 'drop'")


def remaining(consumed: list, total: int) -> np.ndarray:
    """The positions of [0, total) outside the ``consumed`` intervals, in order."""
    mask = np.ones(total, bool)
    for a, b in consumed:
        mask[a:b] = False
    return np.flatnonzero(mask).astype(np.int64)


def check_consumed(consumed: Any, total: int, what: str) -> list[list[int]]:
    """``consumed`` as sorted, disjoint [start, stop) intervals inside [0, total).

    Raises:
        ValueError: anything else.
    """
    ok = isinstance(consumed, list) and all(
        isinstance(i, (list, tuple)) and len(i) == 2 and all(isinstance(v, int) for v in i) for i in consumed)
    flat = [v for i in consumed for v in i] if ok else []
    if not ok or flat != sorted(flat) or any(a >= b for a, b in consumed) or (flat and not
                                                                           0 <= flat[0] <= flat[-1] <= total):
        raise ValueError(f"{what}.load_state_dict: consumed must be sorted [start, stop) intervals inside "
                         f"[0, {total}), got {consumed!r:.200}")
    return [[a, b] for a, b in consumed]


def _intervals(mask: np.ndarray) -> list[list[int]]:
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))).tolist()
    return [[a, b] for a, b in zip(edges[::2], edges[1::2])]


def progress(states: list[dict], total: int, what: str) -> list[list[int]]:
    """The positions of the epoch's sequence that the job which saved
    ``states`` (the reader states of one of its ranks, from
    :func:`reader_states`) consumed on all its ranks and workers, as intervals.

    Every rank is taken to have delivered as many batches as the saving rank
    (lockstep), each DataLoader worker in turn. That tells each rank's count
    while every worker of every rank is still reading; at the end of the
    epoch, only when the saving rank has the longest ranges.

    Raises:
        ValueError: the states cannot tell (one worker's state of several,
            states of different ranks or epochs, batch counts that an
            in-order loader does not give, or the end of the epoch seen from
            a rank with shorter ranges than others).
    """
    head = states[0]
    _check_one_loader(states, what)
    rank, world, mode = head["rank"], head["world_size"], head["mode"]
    if mode.get("even") == "pad":
        raise ValueError(f"{what}.load_state_dict: a state saved with even='pad' repeats records to fill the "
                         "ranks, so what it consumed is not a set of positions; resume with the same world size "
                         "and num_workers, or start the epoch again (ds.set_epoch(state['epoch']))")
    before = check_consumed(head.get("consumed") or [], total, what)
    rest = remaining(before, total)
    saved = _Saved(rank, [int(s["position"]) for s in states],
                   [plan.rank_positions(len(rest), q, world, mode.get("even")) for q in range(world)], mode, what)
    done = _records_done(saved, len(rest)) if mode.get("batch_size") is None else _batches_done(saved, len(rest))
    mask = np.zeros(total, bool)
    mask[rest[done]] = True
    for a, b in before:
        mask[a:b] = True
    return _intervals(mask)


class _Saved(NamedTuple):
    """What the saving rank's reader states tell of the epoch they were saved in."""

    rank: int  # the saving rank
    counts: list[int]  # each of its DataLoader workers' position
    spans: list[tuple[int, int]]  # each rank's [lo, hi) of the positions left before the epoch resumed
    mode: dict  # the mode setting (batch_size, drop_last, even)
    what: str  # the dataset's class name, for messages

    def last(self) -> str:
        """The remedy when only the last rank's state tells what all read."""
        return ("pass the state of the last rank (rank {}), whose readers have the longest ranges, or resume "
                "with the same world size and num_workers").format(len(self.spans) - 1)


def _check_one_loader(states: list[dict], what: str) -> None:
    """``states`` are every worker's of one loader: worker i of n each, in
    the same epoch, rank, world size, mode and consumed positions."""
    head = states[0]
    workers = len(states)
    for i, s in enumerate(states):
        worker = list(s.get("worker") or [0, 1])
        if worker != [i, workers]:
            raise ValueError(f"{what}.load_state_dict: a state of reader {worker} (worker, workers) holds one "
                             f"worker's position only, not what the other workers of its rank read; "
                             + _LOADER_HINT)
        for key in ("epoch", "rank", "world_size", "mode", "consumed"):
            if s.get(key) != head.get(key):
                raise ValueError(f"{what}.load_state_dict: the workers' states differ in {key!r} "
                                 f"({head.get(key)!r} and {s.get(key)!r}): not one loader's state")


def _records_done(saved: _Saved, left: int) -> np.ndarray:
    """Record mode: which of the ``left`` positions every rank's workers
    delivered, each rank's as many as the saving rank's (lockstep)."""
    rank, counts, spans, what = saved.rank, saved.counts, saved.spans, saved.what
    workers = len(counts)
    done = np.zeros(left, bool)
    cuts = [[plan.split_range(*span, w, workers) for w in range(workers)] for span in spans]
    lengths = np.array([[b - a for a, b in row] for row in cuts])  # [rank, worker]
    if (lengths == lengths[rank]).all():  # every rank's workers run out at the same steps
        take = np.minimum(np.array(counts), lengths)
    elif all(counts[w] >= lengths[rank, w] for w in range(workers)):  # this rank read its whole share
        if (lengths > lengths[rank]).any():
            raise ValueError(f"{what}.load_state_dict: rank {rank} had read its whole share of the epoch, "
                             "but ranks with more records may still have been reading; " + saved.last())
        take = lengths
    elif all(counts[w] < lengths[rank, w] and counts[w] <= lengths[:, w].min() for w in range(workers)):
        take = np.broadcast_to(np.array(counts), lengths.shape)  # every worker in the same turn on every rank
    else:
        raise ValueError(f"{what}.load_state_dict: the state was saved at the end of the epoch, where DataLoader "
                         f"workers of different ranks run out at different steps (positions {counts}), so it "
                         "does not tell what the other ranks read; resume with the same world size and "
                         "num_workers (batch mode, batch_size=, whose ranks share batch boundaries, has no such "
                         "steps)")
    for row, counted in zip(cuts, take):
        for (a, b), n in zip(row, counted):
            done[a:min(a + int(n), b)] = True
    return done


def _batches_done(saved: _Saved, left: int) -> np.ndarray:
    """Batch mode: which of the ``left`` positions the ranks' batches held,
    as many batches on each rank as on the saving one (lockstep)."""
    rank, counts, spans, mode, what = saved.rank, saved.counts, saved.spans, saved.mode, saved.what
    workers, size = len(counts), mode["batch_size"]  # set: batch mode
    done = np.zeros(left, bool)
    steps = sum(counts)
    if counts != [len(range(w, steps, workers)) for w in range(workers)]:
        raise ValueError(f"{what}.load_state_dict: the workers delivered {counts} batches, which an in-order "
                         "loader does not give (in_order=False?); resume with the same world size and "
                         "num_workers")

    def batches(a: int, b: int) -> int:
        return (b - a) // size if mode.get("drop_last") else -(-(b - a) // size)

    if steps >= batches(*spans[rank]) and any(batches(*span) > steps for span in spans):
        raise ValueError(f"{what}.load_state_dict: rank {rank} had read all its {steps} batches of the epoch, "
                         "but ranks with more batches may still have been reading; " + saved.last())
    for a, b in spans:
        done[a:min(a + min(steps, batches(a, b)) * size, b)] = True
    return done
