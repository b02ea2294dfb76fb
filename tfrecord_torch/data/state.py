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

__all__ = ["FORMAT", "check_state", "describe_shards_for_state"]

FORMAT = 1  # bump when the meaning of a position changes


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
