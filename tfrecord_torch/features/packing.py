"""Packing of token lists into rows of fixed length, by seqio's rule.

T5 and seqio pipelines put several short examples into one row of
``max_len`` tokens (``seqio.utils.trim_and_pack_dataset``) rather than
padding each example to ``max_len``: a model that masks attention across
segments then sees few padding tokens. :func:`pack_collate` gives the rows
seqio gives for the same examples, as a DataLoader ``collate_fn``: the
dataset's position (and so its resume state) is untouched by packing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tfrecord_torch._args import check_int

__all__ = ["pack_collate"]


def pack_collate(batch: Sequence[Mapping[str, Any]], *, lengths: Mapping[str, int]) -> dict[str, torch.Tensor]:
    """Pack a batch of token-list examples into rows, as seqio's
    ``trim_and_pack_dataset(ds, feature_lengths=lengths)`` packs each group
    of examples.

    Each key of ``lengths`` must hold a 1-D integer tensor (int64 [n], from
    ``Int64(shape=None)`` or a sequence feature) in every example; other
    keys are left out, as seqio leaves them out. Each list is first cut to
    its key's length (tokens past it are dropped, not carried over). Then,
    in the batch's order, an example joins the current row while every key
    still fits in it, and starts a new row when any key would overflow (a
    row is never revisited, as in seqio's ``_pack_with_tf_ops``).

    seqio packs groups of ``max(lengths.values())`` examples and starts a
    new row at each group: ``DataLoader(batch_size=max(lengths.values()))``
    gives its rows exactly; another batch size packs the same way within
    each batch. The number of rows varies from batch to batch.

    Returns:
        For each key ``k`` of ``lengths`` with length L, over R rows:
        ``k`` (the examples' dtype [R, L], 0 after the last segment),
        ``k + "_segment_ids"`` (int32 [R, L]: 1 for the row's first example
        holding tokens of ``k``, 2 for the next, ...; 0 on padding) and
        ``k + "_positions"`` (int32 [R, L]: each token's index in its
        example, 0 on padding), seqio's values and dtypes (seqio gives the
        tokens as int32).

    Raises:
        ValueError: ``lengths`` is not a non-empty mapping of names to
            positive ints; an example lacks a key or holds a value that is
            not a 1-D integer tensor; a token is 0 -- packed rows mark
            padding with 0, as seqio does, so a 0 token cannot be told from
            padding (seqio's pack would cut its example there).
    """
    sizes = _check_lengths(lengths)
    lists = {key: [_tokens(example, key, i, size) for i, example in enumerate(batch)]
             for key, size in sizes.items()}
    plan = _plan_rows(lists, sizes, len(batch))
    out: dict[str, torch.Tensor] = {}
    for key, size in sizes.items():
        out.update(_fill(key, lists[key], plan, size))
    return out


@dataclass(frozen=True)
class _Rows:
    """Where each example goes: its row and, per key, its first column."""

    count: int
    row: np.ndarray  # int64 [N]
    start: dict[str, np.ndarray]  # key -> int64 [N]


def _check_lengths(lengths: Any) -> dict[str, int]:
    if not isinstance(lengths, Mapping) or not lengths or not all(isinstance(k, str) for k in lengths):
        raise ValueError(f"lengths must be a non-empty mapping of feature names to row lengths, such as "
                         f"{{'inputs': 512, 'targets': 114}}, got {lengths!r}")
    return {key: check_int(f"lengths[{key!r}]", size, minimum=1) for key, size in lengths.items()}


def _tokens(example: Mapping[str, Any], key: str, i: int, size: int) -> np.ndarray:
    """Example ``i``'s tokens under ``key``, cut to ``size``, checked."""
    if key not in example:
        raise ValueError(f"pack_collate: example {i} of the batch has no {key!r} (it has {sorted(example)}); "
                         "every key of lengths= must be in every example")
    value = example[key]
    if not isinstance(value, torch.Tensor) or value.dim() != 1 or value.dtype.is_floating_point \
            or value.dtype.is_complex or value.dtype == torch.bool:
        shown = f"a tensor {value.dtype} {list(value.shape)}" if isinstance(value, torch.Tensor) else \
            type(value).__name__
        raise ValueError(f"pack_collate: {key!r} of example {i} is {shown}; packing takes 1-D integer "
                         "tensors (token lists: Int64(shape=None))")
    tokens = value[:size].numpy()
    if not tokens.all():
        column = int(np.flatnonzero(tokens == 0)[0])
        raise ValueError(f"pack_collate: {key!r} of example {i} holds token 0 at index {column}; packed rows "
                         "mark padding with 0 (as seqio does), so 0 cannot be a token -- shift the "
                         "vocabulary or pad_collate these examples instead")
    return tokens


def _plan_rows(lists: dict[str, list[np.ndarray]], sizes: dict[str, int], n: int) -> _Rows:
    """seqio's greedy rule: an example joins the current row unless some key would overflow it."""
    used = dict.fromkeys(sizes, 0)
    row = np.zeros(n, np.int64)
    start = {key: np.zeros(n, np.int64) for key in sizes}
    current = 0
    for i in range(n):
        if any(used[key] + len(lists[key][i]) > size for key, size in sizes.items()):
            current += 1
            used = dict.fromkeys(sizes, 0)
        row[i] = current
        for key in sizes:
            start[key][i] = used[key]
            used[key] += len(lists[key][i])
    return _Rows(current + 1 if n else 0, row, start)


def _fill(key: str, tokens: list[np.ndarray], plan: _Rows, size: int) -> dict[str, torch.Tensor]:
    """The three [R, size] tensors of ``key``, written in one scatter each (NumPy, this thread)."""
    dtype = tokens[0].dtype if tokens else np.int64
    packed = np.zeros((plan.count, size), dtype)
    segments = np.zeros((plan.count, size), np.int32)
    positions = np.zeros((plan.count, size), np.int32)
    counts = np.fromiter((len(t) for t in tokens), np.int64, len(tokens))
    if counts.sum():
        nonempty = counts > 0
        # an example's segment id: 1 + the examples before it in its row holding tokens of this key
        before: np.ndarray = np.cumsum(nonempty) - nonempty
        first_in_row = np.searchsorted(plan.row, plan.row)  # the examples are in row order
        number = before - before[first_in_row] + 1
        offsets = np.cumsum(counts) - counts
        within = np.arange(int(counts.sum())) - np.repeat(offsets, counts)
        where = np.repeat(plan.row * size + plan.start[key], counts) + within
        packed.reshape(-1)[where] = np.concatenate(tokens)
        positions.reshape(-1)[where] = within
        segments.reshape(-1)[where] = np.repeat(number, counts)
    return {key: torch.from_numpy(packed), f"{key}_segment_ids": torch.from_numpy(segments),
            f"{key}_positions": torch.from_numpy(positions)}
