"""The option objects of :func:`~tfrecord_torch.write_dataset`: frozen and
checked when made. ``shards=ShardLayout(...)`` says how the split is cut into
files, ``encoding=Encoding(...)`` how samples become records, and
``execution=Execution(...)`` how the work runs (which never changes the
output's bytes)."""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass

from tfrecord_torch._args import check_choice, check_flag, check_instance, check_int
from tfrecord_torch._types import CompressionArg
from tfrecord_torch.records.compression import CompressionOptions, check_compression
from tfrecord_torch.write.encode import FORMATS

__all__ = ["MOVED", "Encoding", "Execution", "ShardLayout"]


@dataclass(frozen=True)
class ShardLayout:
    """How a split is cut into shard files.

    Attributes:
        size: records per shard, at most (shards get equal shares).
        count: the number of shards (instead of ``size``).
        max_bytes: also at least enough shards for shards of about this size,
            estimated from the first records' encoded size.
        compression: None or "gzip". tf.data reads GZIP shards (with
            ``compression_type="GZIP"``) but TFDS and random access need
            uncompressed ones; only those get indexes.
        compression_options: how GZIP shards are deflated, the
            :class:`~tfrecord_torch.CompressionOptions` that ``RecordWriter``
            and ``ShardedWriter`` take (``level``, ``window_bits``,
            ``mem_level``, ``strategy``); None gives TensorFlow's defaults.
            Only with ``compression``.

    Raises:
        ValueError: a bad number, or ``compression_options`` without a
            ``compression``, naming the field.
        TypeError: ``compression_options`` that is not a CompressionOptions.
    """

    size: int = 10_000
    count: int | None = None
    max_bytes: int | None = None
    compression: CompressionArg = None
    compression_options: CompressionOptions | None = None

    def __post_init__(self) -> None:
        check_int("ShardLayout.size", self.size, minimum=1)
        check_int("ShardLayout.count", self.count, minimum=1, optional=True)
        check_int("ShardLayout.max_bytes", self.max_bytes, minimum=1, optional=True)
        if self.compression_options is not None:
            check_instance("ShardLayout.compression_options", self.compression_options, CompressionOptions,
                           "a CompressionOptions, e.g. CompressionOptions(level=9)")
            if check_compression(self.compression, allow_auto=False) is None:
                raise ValueError(f"ShardLayout.compression_options needs ShardLayout(compression='gzip'), got "
                                 f"compression={self.compression!r}")


@dataclass(frozen=True)
class Encoding:
    """How samples become records.

    Attributes:
        image_format: for decoded pixels: "png" (lossless, default), "jpeg"
            (``quality``) or "raw" (HWC bytes with the shape).
        quality: JPEG quality in [1, 100].
        class_names: label names for the metadata (default: ``dataset.classes``).
    """

    image_format: str = "png"
    quality: int = 95
    class_names: list[str] | None = None

    def __post_init__(self) -> None:
        check_choice("image_format", self.image_format, FORMATS)
        check_int("quality", self.quality, minimum=1, maximum=100)
        if self.class_names is not None:
            object.__setattr__(self, "class_names", list(self.class_names))


@dataclass(frozen=True)
class Execution:
    """How the shard tasks run; none of it changes what is written.

    Attributes:
        executor: a ``concurrent.futures.Executor`` running one task per
            shard, e.g. ``distributed.Client(address).get_executor()``. Its
            tasks receive a picklable recipe of the source (see
            :class:`~tfrecord_torch.DatasetSource`).
        num_workers: without ``executor``: processes writing shards (0: this
            process; None: one per core for 5,000 samples or more).
        retries: times a failed shard task is tried again.
        progress: show a progress bar over shards.
    """

    executor: cf.Executor | None = None
    num_workers: int | None = None
    retries: int = 2
    progress: bool = True

    def __post_init__(self) -> None:
        check_int("Execution.num_workers", self.num_workers, optional=True)
        check_int("Execution.retries", self.retries)
        check_flag("Execution.progress", self.progress)
        if self.executor is not None and not isinstance(self.executor, cf.Executor):
            raise ValueError(f"executor must be a concurrent.futures.Executor, got {type(self.executor).__name__}")
        if self.executor is not None and self.num_workers:
            raise ValueError("give executor= or num_workers=, not both")


# old keyword of write_dataset -> (its new keyword, the option object's spelling)
MOVED = {
    "shard_size": ("shards", "ShardLayout(size={value!r})"),
    "num_shards": ("shards", "ShardLayout(count={value!r})"),
    "max_shard_bytes": ("shards", "ShardLayout(max_bytes={value!r})"),
    "compression": ("shards", "ShardLayout(compression={value!r})"),
    "image_format": ("encoding", "Encoding(image_format={value!r})"),
    "quality": ("encoding", "Encoding(quality={value!r})"),
    "class_names": ("encoding", "Encoding(class_names={value!r})"),
    "executor": ("execution", "Execution(executor={value!r})"),
    "num_workers": ("execution", "Execution(num_workers={value!r})"),
    "retries": ("execution", "Execution(retries={value!r})"),
    "progress": ("execution", "Execution(progress={value!r})"),
}

