"""Planning a conversion before writing anything: pure functions of integers.

A plan fixes everything that decides the output's bytes before any shard is
written: the number of records, the write order (a seeded permutation of the
source's indices, or the source order), and one frozen :class:`ShardSpec` per
shard (its index, its range of the write order and its final path). Each
shard can then be written by an independent task, on any process or machine,
and the result is the same whichever writes it.

The write order does not come from a random number generator whose stream
could change between numpy versions (a cluster's machines may differ): each
index gets a key from a fixed 64-bit mixing function (splitmix64's finalizer,
a bijection, so keys never tie) of the index and the seed, and the order is
the indices sorted by key -- the way TFDS shuffles by hashed keys.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from tfrecord_torch.io import files as fs
from tfrecord_torch.tfds.layout import SAFE_NAME, shard_name

__all__ = ["MAX_SHARDS", "ConversionPlan", "ShardSpec", "plan_conversion", "shard_bounds", "write_order"]

MAX_SHARDS = 99_999  # five digits in TFDS's shard names
_U64 = np.uint64


@dataclass(frozen=True)
class ShardSpec:
    """One shard of a plan: records ``start:stop`` of the write order go to ``path``.

    Attributes:
        index: the shard's number, 0-based.
        num_shards: how many shards the split has.
        start, stop: the shard's range of the write order.
        path: the shard's final path or URL (its index is ``path + ".index"``).
    """

    index: int
    num_shards: int
    start: int
    stop: int
    path: str

    @property
    def records(self) -> int:
        """How many records the shard holds."""
        return self.stop - self.start


@dataclass(frozen=True)
class ConversionPlan:
    """A whole split's conversion, decided before any shard is written.

    Attributes:
        output_dir: the folder (absolute) or URL prefix the shards go to.
        name, split: TFDS dataset and split names.
        length: the number of records.
        seed, shuffle: the write order (see :func:`write_order`).
        compression: None or "gzip".
        shards: one spec per shard, in order; their ranges tile ``[0, length)``.
    """

    output_dir: str
    name: str
    split: str
    length: int
    seed: int
    shuffle: bool
    compression: str | None
    shards: tuple[ShardSpec, ...]

    def order(self) -> np.ndarray:
        """The write order: record ``j`` of the split is source sample ``order()[j]``."""
        return write_order(self.length, seed=self.seed, shuffle=self.shuffle)

    def sources(self, spec: ShardSpec) -> np.ndarray:
        """The source indices of shard ``spec``'s records, in the order written."""
        return self.order()[spec.start:spec.stop]


def write_order(length: int, *, seed: int = 0, shuffle: bool = True) -> np.ndarray:
    """The order in which a conversion writes a source's samples.

    Args:
        length: the number of samples.
        seed: an int in [0, 2**64); the same seed gives the same order on
            every machine and numpy version.
        shuffle: False keeps the source order.

    Returns:
        A read-only int64 array [length]: record ``j`` of the split (shards
        laid end to end) is source sample ``order[j]``.
    """
    if not isinstance(length, (int, np.integer)) or isinstance(length, bool) or length < 0:
        raise ValueError(f"length must be an int >= 0, got {length!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2 ** 64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    return _order(int(length), int(seed), bool(shuffle))


@functools.lru_cache(maxsize=4)  # each task of a plan needs the same order: compute it once per process
def _order(length: int, seed: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        order = np.arange(length, dtype=np.int64)
    else:
        salt = _mix(np.array([seed], _U64))
        keys = _mix(np.arange(length, dtype=_U64) ^ salt)
        order = np.argsort(keys, kind="stable").astype(np.int64)
    order.flags.writeable = False
    return order


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + _U64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
        return x ^ (x >> _U64(31))


def shard_bounds(length: int, num_shards: int) -> list[tuple[int, int]]:
    """``num_shards`` contiguous ranges tiling ``[0, length)``, sizes differing by at most one."""
    return [(i * length // num_shards, (i + 1) * length // num_shards) for i in range(num_shards)]


def plan_conversion(length: int, output_dir: str | os.PathLike, *, name: str, split: str, num_shards: int,
                    seed: int = 0, shuffle: bool = True, compression: str | None = None) -> ConversionPlan:
    """Plan the conversion of ``length`` samples into ``num_shards`` shards.

    Args:
        length: the number of samples.
        output_dir: a local folder (made absolute, as tasks may run elsewhere)
            or a URL prefix.
        name, split: TFDS names (letters, digits, '_' and '.', not first).
        num_shards: in [1, 99999]; at most ``length`` unless ``length`` is 0
            (then one empty shard, as TFDS writes).
        seed, shuffle: the write order (see :func:`write_order`).
        compression: None or "gzip".

    Returns:
        The frozen plan.
    """
    for arg, text in (("name", name), ("split", split)):
        if not isinstance(text, str) or not SAFE_NAME.fullmatch(text) or text.startswith("."):
            raise ValueError(f"{arg} must be letters, digits, '_' and '.' (not first), as TFDS names are; "
                             f"got {text!r}")
    if compression not in (None, "gzip"):
        raise ValueError(f"compression must be one of (None, 'gzip'), got {compression!r}")
    write_order(length, seed=seed, shuffle=shuffle)  # checks length and seed
    most = max(1, min(length, MAX_SHARDS))
    if not isinstance(num_shards, int) or isinstance(num_shards, bool) or not 1 <= num_shards <= most:
        raise ValueError(f"num_shards must be an int in [1, {most}] for {length} records, got {num_shards!r}")
    base = os.fspath(output_dir)
    if fs.is_url(base):
        base = base.rstrip("/")
        join = lambda f: f"{base}/{f}"
    else:
        base = os.path.abspath(fs.local(base))
        join = lambda f: os.path.join(base, f)
    shards = tuple(ShardSpec(i, num_shards, start, stop, join(shard_name(name, split, i, num_shards, compression)))
                   for i, (start, stop) in enumerate(shard_bounds(length, num_shards)))
    return ConversionPlan(base, name, split, int(length), int(seed), bool(shuffle), compression, shards)
