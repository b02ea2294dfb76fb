"""Converting torchvision datasets (and any (image, label) dataset) to shards.

A conversion is planned first (``plan.py``: length, seeded write order, one
frozen spec per shard), then each shard is written by one task on any
``concurrent.futures.Executor`` (``task.py``, ``executor.py``), and the TFDS
metadata is committed once every shard is complete (``commit.py``). The
record schema is in ``encode.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from typing import Any, cast

from tfrecord_torch._args import check_instance, moved_keywords
from tfrecord_torch._types import PathLike
from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.io import atomic
from tfrecord_torch.io import files as fs
from tfrecord_torch.records.compression import CompressionOptions
from tfrecord_torch.tfds.metadata import check_dataset_name
from tfrecord_torch.write.commit import commit, finished_shards
from tfrecord_torch.write.encode import FORMATS, encode_sample, file_samples
from tfrecord_torch.write.executor import default_workers, run_tasks, shard_executor
from tfrecord_torch.write.options import MOVED, Encoding, Execution, ShardLayout
from tfrecord_torch.write.plan import MAX_SHARDS, ConversionPlan, plan_conversion, write_order
from tfrecord_torch.write.source import DatasetSource, describe, recipe_of, source_of
from tfrecord_torch.write.stats import ImageStats
from tfrecord_torch.write.task import ShardTask, files_digest

__all__ = ["FORMATS", "write_dataset"]

log = logging.getLogger(__name__)
AUTO_PROCESSES_FROM = 5_000  # num_workers=None: below this many samples, processes cost more than they save
_PLAN_VERSION = 1
_SIZE_SAMPLE = 16  # records encoded to estimate the shard count from ShardLayout.max_bytes


@moved_keywords(MOVED)
def write_dataset(dataset: Any, output_dir: PathLike, *, name: str, split: str = "train", shuffle: bool = True,
                  seed: int = 0, shards: ShardLayout | None = None, encoding: Encoding | None = None,
                  execution: Execution | None = None, storage_options: dict | None = None) -> list[str]:
    """Write a dataset of images and labels as TFDS-style sharded TFRecords.

    The conversion is planned first (the write order and every shard's range
    and path), then each shard is written by one task, then the metadata is
    written once all shards are complete. The output's bytes depend only on
    the source, ``seed``, ``shuffle``, the shard count and the options: the
    same whether written in this process, by processes, or on a Dask cluster.
    A rerun after a failure writes only the shards still missing.

    Args:
        dataset: a map-style dataset yielding ``(image, label)`` or dicts with
            ``"image"`` and ``"label"``; images as PIL images, uint8/uint16
            tensors [C, H, W] / [H, W] or arrays [H, W, C] / [H, W]. A dataset
            that exposes its files (ImageFolder's ``samples``) and has no
            transform is copied byte for byte, without decoding (16-bit
            files among 8-bit ones are stored as the 8-bit RGB its loader's
            ``convert("RGB")`` gives, as TFDS keeps one dtype per feature;
            a folder of 16-bit files only stays 16-bit). Or a
            :class:`DatasetSource` recipe that builds one.
        output_dir: the folder for shards, indexes and TFDS metadata, or a URL
            (``s3://bucket/prefix``).
        name: the TFDS dataset name.
        split: the TFDS split name.
        shuffle: write the samples in a seeded random order (as TFDS does),
            so every shard mixes classes; False keeps the source order.
        seed: the write order's seed; record ``j`` of the split is source
            sample ``write_order(len(dataset), seed=seed)[j]``.
        shards: a :class:`ShardLayout`: records per shard (``size``, default
            10,000), or the shard ``count``, or ``max_bytes`` per shard, the
            ``compression``, and ``compression_options`` (a
            :class:`~tfrecord_torch.CompressionOptions`, as ``RecordWriter``
            takes it: ``ShardLayout(compression="gzip",
            compression_options=CompressionOptions(level=9))``).
        encoding: an :class:`Encoding`: ``image_format`` ("png", "jpeg" or
            "raw"), JPEG ``quality``, ``class_names``.
        execution: an :class:`Execution`: an ``executor`` or ``num_workers``
            processes, ``retries``, ``progress`` (a bar over shards, default on).
        storage_options: fsspec options when ``output_dir`` is a URL.

    Returns:
        The shard paths.

    Raises:
        TypeError: a sample cannot be converted; the message names its index.
            Decoded samples of both 8-bit and 16-bit images (before the
            metadata is written).
    """
    layout = check_instance("shards", shards or ShardLayout(), ShardLayout, "a ShardLayout")
    encoding = check_instance("encoding", encoding or Encoding(), Encoding, "an Encoding")
    execution = check_instance("execution", execution or Execution(), Execution, "an Execution")
    image_format, compression = encoding.image_format, layout.compression
    executor, num_workers, retries, progress = (execution.executor, execution.num_workers, execution.retries,
                                                execution.progress)
    num_shards = layout.count
    source = dataset.build() if isinstance(dataset, DatasetSource) else dataset
    files = file_samples(source)
    class_names = encoding.class_names if encoding.class_names is not None else _classes(source)
    options = {"format": image_format, "quality": encoding.quality, "class_names": class_names}
    length = len(source)
    check_dataset_name(output_dir, name, storage_options)  # before any shard, not after all of them
    if num_shards is None:
        num_shards = _shard_count(source, files, options, length, layout.size, layout.max_bytes, seed, shuffle)
    elif num_shards > max(1, length):
        raise ValueError(f"num_shards must be at most the number of samples ({length}), got {num_shards}")
    plan = plan_conversion(length, output_dir, name=name, split=split, num_shards=num_shards, seed=seed,
                           shuffle=shuffle, compression=compression)
    digest = files_digest(files) if files is not None else None
    fingerprint = _fingerprint(plan, options, dataset, source, digest, layout.compression_options)
    with _split_lock(plan):
        done = finished_shards(plan, fingerprint, storage_options)
        if done:
            log.info("%s-%s: %d of %d shards already written by an earlier run of this plan; writing the rest",
                     name, split, len(done), len(plan.shards))
        recipe = source_of(dataset) if executor is not None else None

        def write(specs, opts: dict) -> None:
            tasks = [ShardTask(spec=spec, length=length, seed=seed, shuffle=shuffle, compression=compression,
                               compression_options=layout.compression_options, options=opts,
                               fingerprint=fingerprint, files_digest=digest, source=recipe,
                               storage_options=storage_options)
                     for spec in specs]
            if not tasks:
                return
            workers = 0
            if executor is None:
                workers = num_workers if num_workers is not None else \
                    default_workers(length, len(tasks), AUTO_PROCESSES_FROM)
                if workers > len(tasks) > 0:
                    log.info("%d shards to write: %d processes, not %d (a shard is one task)",
                             len(tasks), len(tasks), workers)
                    workers = len(tasks)
            run = lambda ex: run_tasks(tasks, ex, retries=retries, progress=progress, total=len(plan.shards),
                                       done=len(plan.shards) - len(tasks))
            if executor is not None:
                done.update(run(executor))
            else:
                with shard_executor(source, workers) as ex:
                    done.update(run(ex))

        write([spec for spec in plan.shards if spec.index not in done], options)
        stats = _merged(done)
        if stats.mixed_depths and files is not None:
            # An ImageFolder of 8- and 16-bit files: TFDS keeps one dtype per image feature, so
            # the shards holding 16-bit files are written again with those files as the 8-bit
            # RGB its loader gives (encode.rgb8_png); a folder of 16-bit files only stays 16-bit.
            wide = [spec for spec in plan.shards if ImageStats.from_json(done[spec.index].stats).uint16]
            log.warning("%s-%s: 8- and 16-bit images, and TFDS keeps one dtype per image feature: the 16-bit "
                        "files (in %d shards) are stored as the 8-bit RGB the ImageFolder gives for them "
                        "(PIL's convert('RGB'), which saturates samples above 255)", name, split, len(wide))
            write(wide, {**options, "rgb8": True})
            stats = _merged(done)
        if stats.mixed_depths:
            raise TypeError(f"{name}-{split}: the samples mix 8-bit and 16-bit images, and TFDS keeps one dtype "
                            "per image feature (an 8-bit image would read as 16-bit): give every image one "
                            "depth (a transform converting them), then write again into an empty folder; "
                            "the shards are written, the metadata is not")
        features = stats.features(image_format if files is None else None, class_names)
        return commit(plan, done, features=features, class_names=class_names, storage_options=storage_options)


def _merged(done: dict) -> ImageStats:
    """The split's image stats: every shard's, merged."""
    stats = ImageStats()
    for result in done.values():
        stats.merge(ImageStats.from_json(result.stats))
    return stats


def _classes(dataset: Any) -> list[str] | None:
    classes = getattr(dataset, "classes", None)
    return [str(c) for c in classes] if classes is not None else None


def _shard_count(dataset: Any, files: list | None, options: dict, length: int, shard_size: int,
                 max_bytes: int | None, seed: int, shuffle: bool) -> int:
    count = math.ceil(length / shard_size)
    if max_bytes is not None and length:
        sample = write_order(length, seed=seed, shuffle=shuffle)[:_SIZE_SAMPLE].tolist()
        mean = sum(len(encode_sample(i, dataset, files, options)[0]) + 16 for i in sample) / len(sample)
        count = max(count, math.ceil(mean * length / max_bytes))
    if count > MAX_SHARDS:
        raise ValueError(f"{length} samples need {count} shards, more than TFDS names allow ({MAX_SHARDS}); "
                         "lower ShardLayout(size=) or raise ShardLayout(max_bytes=)")
    return max(1, min(count, length))


def _fingerprint(plan: ConversionPlan, options: dict, dataset: Any, source: Any, digest: str | None,
                 compression_options: CompressionOptions | None = None) -> str:
    """The identity of what the plan writes: shards of an earlier run with the
    same fingerprint are kept by a rerun."""
    recipe = recipe_of(dataset)
    if digest is not None:
        what: Any = {"files": digest}
    elif recipe is not None:
        what = describe(recipe)
    else:  # content unknown: a rerun trusts shards of a same-typed, same-length source
        what = f"{type(source).__module__}.{type(source).__qualname__}"
    data = {"version": _PLAN_VERSION, "length": plan.length, "seed": plan.seed, "shuffle": plan.shuffle,
            "num_shards": len(plan.shards), "compression": plan.compression, "options": describe(options),
            "source": what}
    if compression_options is not None:  # absent by default: the fingerprints of earlier runs stay valid
        data["compression_options"] = dataclasses.asdict(compression_options)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


_held_locks: set[int] = set()


def _drop_locks_in_child() -> None:
    # A forked pool worker must not keep the parent's lock alive: if the parent
    # is killed, a rerun could not start until every orphan had exited.
    for fd in _held_locks:
        try:
            os.close(fd)
        except OSError:
            pass
    _held_locks.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_locks_in_child)


class _split_lock:
    """One converter of a name/split per local folder (object stores have no locks)."""

    def __init__(self, plan: ConversionPlan) -> None:
        self.path = None if fs.is_url(plan.output_dir) else \
            os.path.join(plan.output_dir, f".{plan.name}-{plan.split}.lock")
        self.fd: int | None = None

    def __enter__(self) -> None:
        if self.path is None:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = atomic.lock_file(self.path, wait=False)
        if self.fd is None:
            raise TFRecordError(f"another process is writing {os.path.basename(self.path)[1:-5]} into "
                                f"{os.path.dirname(self.path)} (lock {self.path} is held)")
        _held_locks.add(self.fd)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            _held_locks.discard(self.fd)
            atomic.unlock(cast(str, self.path), self.fd)
            self.fd = None
