"""The splits a folder holds side by side, told from its shard names.

Slim, TFDS and most TF pipelines keep several splits in one folder:
``train-00000-of-00004`` ... beside ``validation-00000-of-00001``, or TFDS's
``mnist-train.tfrecord-00000-of-00001`` beside ``mnist-test.tfrecord-00000-of-00001``.
A folder path read whole would mix them without a word, so a folder whose shard
names form more than one such group is refused with the glob of each group.
"""

from __future__ import annotations

import fnmatch
import glob
import re
from typing import NamedTuple

__all__ = ["ShardGroup", "check_one_split", "shard_groups"]

# <prefix><sep>NNNNN-of-NNNNN<suffix>: "train-00000-of-00004", "flowers_train_00000-of-00005.tfrecord",
# "mnist-train.tfrecord-00000-of-00001.gz"
_SHARD = re.compile(r"(?P<prefix>.+?)(?P<sep>[-_])(?P<shard>\d+)-of-(?P<count>\d+)(?P<suffix>(?:\.[A-Za-z0-9_]+)*)")
_TFDS = re.compile(r"(?P<name>.+)-(?P<split>[A-Za-z0-9_]+)\.[A-Za-z0-9_]+")  # TFDS's "{name}-{split}.{format}"


class ShardGroup(NamedTuple):
    """The shards of one split in a folder: its ``label`` (the split's name), the
    ``pattern`` that matches them and no other file of the folder, their names, and
    whether ``label`` is a split of TFDS's ``{name}-{split}.{format}`` names."""

    label: str
    pattern: str
    names: tuple[str, ...]
    tfds: bool


def shard_groups(names: list[str]) -> list[ShardGroup]:
    """The groups of ``<prefix>-NNNNN-of-NNNNN`` names among ``names`` (file names, no
    folder), in order of their first name; names of no such form belong to no group."""
    keys: dict[tuple[str, str, str], list[str]] = {}
    for name in names:
        m = _SHARD.fullmatch(name)
        if m is not None:
            keys.setdefault((m["prefix"], m["sep"], m["suffix"]), []).append(name)
    tfds: dict[tuple[str, str, str], re.Match[str] | None] = {key: _TFDS.fullmatch(key[0]) for key in keys}
    labels = {key: m["split"] if m is not None else key[0] for key, m in tfds.items()}
    if len(set(labels.values())) < len(labels):  # two datasets' "train": name them whole
        labels = {key: key[0] for key in keys}
        tfds = {key: None for key in keys}
    patterns = {}
    for key, members in keys.items():
        prefix, sep, suffix = key
        pattern = f"{glob.escape(prefix)}{sep}*{suffix}"
        if any(fnmatch.fnmatchcase(n, pattern) for n in names if n not in members):  # "train-*" over "train-extra-..."
            pattern = f"{glob.escape(prefix)}{sep}[0-9]*-of-[0-9]*{suffix}"
        patterns[key] = pattern
    if len(set(labels.values())) < len(labels):  # "train-..." and "train-....gz": name them by their globs
        labels = patterns
    return [ShardGroup(labels[key], patterns[key], tuple(members), tfds[key] is not None)
            for key, members in keys.items()]


def check_one_split(folder: str, files: list[str], join) -> None:
    """Raise ValueError if the ``files`` of ``folder`` (as the user named it) form more
    than one group of shards; ``join(folder, pattern)`` makes the glob to suggest."""
    names = [f.replace("\\", "/").rsplit("/", 1)[-1] for f in files]
    groups = shard_groups(names)
    if len(groups) < 2:
        return
    shown = ", ".join(f"{g.label} ({len(g.names)} shard{'s' if len(g.names) != 1 else ''}: "
                      f"{join(folder, g.pattern)!r})" for g in groups)
    others = len(names) - sum(len(g.names) for g in groups)
    rest = f", and {others} other file{'s' if others != 1 else ''}" if others else ""
    split = next((g.label for g in groups if g.label == "train"), groups[0].label)
    tfds = (f"; for a TFDS folder, tfds_dataset({folder!r}, {split!r}) reads one split with its features"
            if all(g.tfds for g in groups) else "")
    raise ValueError(f"folder {folder} holds {len(groups)} splits: {shown}{rest}; a folder path would read them "
                     f"all as one dataset: pass the glob of the split you want (or {join(folder, '*')!r} to "
                     f"read every file together){tfds}")
