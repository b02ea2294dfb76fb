"""Before and after a conversion's tasks: what is already done, and the commit.

:func:`finished_shards` reads the completion markers a run (or an earlier,
interrupted run of the same plan) left, so that a rerun writes only what is
missing. :func:`commit` runs once every shard is complete: it writes the TFDS
metadata (``dataset_info.json`` with ``shardLengths``, ``features.json``,
``label.labels.txt``) -- the point at which the split becomes loadable -- and
then removes what no longer belongs: shards and indexes of this split with
other shard counts, every completion marker (a finished conversion leaves
only shards, their indexes in ``index/`` and the metadata), partial files of
killed tasks, and indexes an earlier version left beside the shards.
"""

from __future__ import annotations

import json
import logging
import os
import re

from tfrecord_torch.io import atomic
from tfrecord_torch.io import files as fs
from tfrecord_torch.io.retry import retrying
from tfrecord_torch.records.index import INDEX_FOLDER, writer_index_path
from tfrecord_torch.records.stamp import stamp_path
from tfrecord_torch.tfds.metadata import write_metadata
from tfrecord_torch.write.plan import ConversionPlan
from tfrecord_torch.write.task import MARKER_FOLDER, MARKER_VERSION, ShardResult, marker_path

__all__ = ["commit", "finished_shards", "list_split"]

log = logging.getLogger(__name__)
_MAX_MARKER = 1 << 20


def list_split(folder: str, prefix: str, storage_options: dict | None) -> dict[str, int]:
    """Files in ``folder`` (hidden ones too) whose names, leading dots aside,
    start with ``prefix``: base name -> size."""
    if fs.is_url(folder):
        filesystem, path = fs.filesystem(folder, storage_options)
        try:
            found = retrying("list", folder, lambda: filesystem.ls(path, detail=True, refresh=True))
        except FileNotFoundError:
            return {}
        entries = {os.path.basename(e["name"].rstrip("/")): int(e.get("size") or 0) for e in found
                   if e.get("type") != "directory"}
    else:
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return {}
        entries = {}
        for name in names:
            try:
                entries[name] = os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:  # removed while listing
                continue
    return {name: size for name, size in entries.items() if name.lstrip(".").startswith(prefix)}


def _prefix(plan: ConversionPlan) -> str:
    return f"{plan.name}-{plan.split}.tfrecord-"


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if fs.is_url(folder) else os.path.join(folder, name)


def finished_shards(plan: ConversionPlan, fingerprint: str, storage_options: dict | None) -> dict[int, ShardResult]:
    """Shards of ``plan`` a run already completed: marker of this plan present,
    shard (and index) present with the size the marker records."""
    listing = list_split(plan.output_dir, _prefix(plan), storage_options)
    indexes = list_split(_join(plan.output_dir, INDEX_FOLDER), _prefix(plan), storage_options)
    markers = list_split(_join(plan.output_dir, MARKER_FOLDER), _prefix(plan), storage_options)
    done = {}
    for spec in plan.shards:
        base = os.path.basename(spec.path)
        marker = os.path.basename(marker_path(spec.path))
        if marker not in markers or base not in listing:
            continue
        if plan.compression is None and os.path.basename(writer_index_path(spec.path)) not in indexes:
            continue
        try:
            data = json.loads(fs.read_bytes(marker_path(spec.path), storage_options, limit=_MAX_MARKER))
        except (OSError, ValueError) as e:
            log.warning("%s: unreadable completion marker (%s); the shard is written again",
                        marker_path(spec.path), e)
            continue
        if not isinstance(data, dict) or data.get("version") != MARKER_VERSION or \
                data.get("fingerprint") != fingerprint or data.get("index") != spec.index:
            continue  # another plan's (other source, seed, options): write it again
        if data.get("records") != spec.records or data.get("size") != listing[base]:
            continue
        done[spec.index] = ShardResult(spec.index, spec.records, int(data["size"]), data.get("stats") or {})
    return done


def commit(plan: ConversionPlan, results: dict[int, ShardResult], *, features: dict,
           class_names: list[str] | None, storage_options: dict | None) -> list[str]:
    """Write the split's metadata once every shard is complete, then tidy up.

    Returns:
        The shard paths, in order.
    """
    missing = [spec.index for spec in plan.shards if spec.index not in results]
    if missing:
        raise RuntimeError(f"commit of {plan.name}-{plan.split} with shards {missing[:10]} missing")
    lengths = [results[spec.index].records for spec in plan.shards]
    write_metadata(plan.output_dir, name=plan.name, split=plan.split, shard_lengths=lengths,
                   num_bytes=sum(results[spec.index].size for spec in plan.shards), features=features,
                   class_names=class_names, compression=plan.compression, storage_options=storage_options)
    _remove_leftovers(plan, storage_options)
    return [spec.path for spec in plan.shards]


def _remove_leftovers(plan: ConversionPlan, storage_options: dict | None) -> None:
    shards = {os.path.basename(spec.path) for spec in plan.shards}
    indexes = set()
    for spec in plan.shards:
        index = writer_index_path(spec.path)
        indexes |= {os.path.basename(index), os.path.basename(stamp_path(index))}
    staged = re.compile(r"\.\.?.*\.staged.*")  # ShardedWriter's staging: its own run cleans those up
    for folder, keep in ((plan.output_dir, shards), (_join(plan.output_dir, INDEX_FOLDER), indexes),
                         (_join(plan.output_dir, MARKER_FOLDER), set())):
        for name in list_split(folder, _prefix(plan), storage_options):
            if name in keep or staged.fullmatch(name):
                continue
            path = _join(folder, name)
            try:
                if fs.is_url(path):
                    atomic.remove(path, storage_options)
                else:
                    os.unlink(path)
            except FileNotFoundError:
                pass
    if not fs.is_url(plan.output_dir):
        try:  # no empty marker folder left behind (another split's run may still be using it)
            os.rmdir(_join(plan.output_dir, MARKER_FOLDER))
        except OSError:
            pass
