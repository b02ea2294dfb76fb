"""The option objects of :class:`~tfrecord_torch.TFRecordDataset`: frozen and
checked when made, each grouping the knobs of one concern.

``shuffle=Shuffling(...)`` says how to shuffle (and that it does);
``sharding=Sharding(...)`` how ranks split the records; ``source=Source(...)``
how the shards are found, indexed and checked; ``batching=Batching(...)``
what batch mode and image decoding do. Everyday arguments (paths, features,
transform, shuffle, seed, batch_size, on_error, storage_options) stay flat on
the dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tfrecord_torch._args import check_choice, check_flag, check_instance, check_int, refuse_moved
from tfrecord_torch._types import CompressionArg, PathLike
from tfrecord_torch.data.plan import EVEN_MODES
from tfrecord_torch.features.images.engine import ImageBatching
from tfrecord_torch.io.budget import ReadBudget
from tfrecord_torch.io.shardcache import ShardCache

__all__ = ["MOVED", "Batching", "DatasetOptions", "Sharding", "Shuffling", "Source", "dataset_options",
           "refuse_moved_keywords"]

@dataclass(frozen=True)
class Shuffling:
    """How a shuffling dataset shuffles (``TFRecordDataset(shuffle=Shuffling(...))``;
    ``shuffle=True`` is ``Shuffling()``). Deterministic in the dataset's seed and the epoch.

    Attributes:
        block: indexed shards: 1 (default) for a true permutation of all
            (shard, record) pairs; k > 1 permutes runs of k consecutive records
            (fewer, longer reads, for remote storage) and mixes the records of
            256 runs at a time.
        buffer: size of a buffer that further mixes the record stream. None:
            0 for indexed shards (already a true permutation), 10,000 for
            streamed (compressed) shards. Unlike tf.data's it does not wait
            to fill: it yields from its 128th record on, growing to its size.
        cycle_length: streamed shards a reader interleaves at once (as
            tf.data's ``interleave``).
    """

    block: int = 1
    buffer: int | None = None
    cycle_length: int = 4

    def __post_init__(self) -> None:
        check_int("Shuffling.block", self.block, minimum=1)
        check_int("Shuffling.buffer", self.buffer, optional=True)
        check_int("Shuffling.cycle_length", self.cycle_length, minimum=1)

    def size(self, streamed: bool) -> int:
        """The buffer's size: ``buffer``, or if unset 10,000 where shards are
        streamed (dealt whole, so mixed only by it) and 0 otherwise."""
        return (10_000 if streamed else 0) if self.buffer is None else self.buffer


@dataclass(frozen=True)
class Sharding:
    """How the records split over distributed ranks (``TFRecordDataset(sharding=Sharding(...))``).

    Attributes:
        rank, world_size: this process's rank, both or neither; None: from
            torch.distributed, then the RANK / WORLD_SIZE environment, then (0, 1).
        even: None (ranks may get one record more or less), "pad" (every rank
            gets ceil(N / world_size): the first records of the epoch repeat) or
            "drop" (floor(N / world_size): the last records are left out this
            epoch). DistributedDataParallel hangs on unequal counts.
    """

    rank: int | None = None
    world_size: int | None = None
    even: str | None = None

    def __post_init__(self) -> None:
        check_int("Sharding.rank", self.rank, optional=True)
        check_int("Sharding.world_size", self.world_size, minimum=1, optional=True)
        check_choice("even", self.even, EVEN_MODES)


@dataclass(frozen=True)
class Source:
    """How the shards are read (``TFRecordDataset(source=Source(...))``).

    Attributes:
        index: None to use each uncompressed shard's index (found beside it,
            else built and kept in the local index cache, never in the shards'
            folder); "beside" to write the indexes it builds beside the shards
            (``<shard>.index``, as DALI's tfrecord2idx does); a list of index
            paths, one per shard; False to stream every shard.
        lengths: each shard's record count, known in advance (a TFDS folder's
            ``shardLengths``): ``len()`` and the split plan use them without
            reading anything, and the shards are indexed only when first read
            (an index that disagrees is an error naming the shard).
        compression: of the shards: "auto", None, "gzip" or "zlib".
        verify: check record CRCs.
        progress: a progress bar on stderr while shards without index files
            are indexed: None (default) shows it when stderr is a terminal
            and not in a DataLoader worker; True or False always or never.
        cache: node-local copies of remote shards (whole shards, copied
            ahead of use in the epoch's order, shared by the machine's
            workers and ranks, reused by later epochs). "auto" (default):
            copies in the default folder (``$TFRECORD_TORCH_SHARD_CACHE``, else
            ``~/.cache/tfrecord_torch/shards``) when the dataset's remote
            shards fit in the least of 32 GiB and what the folder holds plus
            half its disk's free space; else (or with
            ``TFRECORD_TORCH_SHARD_CACHE=off``, a folder that cannot be
            written, or a shard the server gives no ETag) range requests,
            saying why in one log line. Decided when
            the dataset is made; DataLoader workers share the decision. A
            :class:`~tfrecord_torch.io.shardcache.ShardCache`: copies where and
            as many as it says. None: remote shards are read by range
            requests. Local shards are never copied, and nothing is ever
            written beside the shards.
        read_budget: how many bytes the first reads of an iteration ask for
            and how they grow (a :class:`~tfrecord_torch.io.budget.ReadBudget`;
            None: its defaults, a first read of 1 MiB, each next twice the
            one before). A bucket far away may want a larger first read
            (fewer round trips); one near, a smaller one (the first batch sooner).
            The same value holds the reads' other byte budgets: what a reader
            holds in memory, how a URL's ranges are requested
            (``requests``) and how a shard copy is filled (``fill``).
    """

    index: Sequence[PathLike] | str | bool | None = None
    lengths: Sequence[int] | None = None
    compression: CompressionArg = "auto"
    verify: bool = True
    progress: bool | None = None
    cache: ShardCache | str | None = "auto"
    read_budget: ReadBudget | None = None

    def __post_init__(self) -> None:
        if isinstance(self.index, (list, tuple)):
            object.__setattr__(self, "index", tuple(self.index))
        elif self.index is not None and self.index is not False and not isinstance(self.index, str):
            raise ValueError(f"index must be None, 'beside', False or a list of index paths, got {self.index!r}")
        check_flag("Source.verify", self.verify)
        check_flag("Source.progress", self.progress, optional=True)
        if not (self.cache is None or isinstance(self.cache, ShardCache) or _is_auto(self.cache)):
            raise ValueError(f"Source.cache must be a ShardCache (ShardCache(directory=..., limit=...)), "
                             f"\"auto\" or None, got {self.cache!r}")
        if self.read_budget is not None:
            check_instance("Source.read_budget", self.read_budget, ReadBudget,
                           "a ReadBudget (ReadBudget(first=..., early=..., window=...)) or None")
        if self.lengths is not None:
            lengths = tuple(self.lengths)
            for n in lengths:
                check_int("Source.lengths[...]", n)
            object.__setattr__(self, "lengths", lengths)
            if self.index is False:
                raise ValueError("lengths= reads shards by position (they are indexed when read); "
                                 "it cannot go with index=False")


def _is_auto(cache: Any) -> bool:
    return isinstance(cache, str) and cache == "auto"


@dataclass(frozen=True)
class Batching:
    """Batch mode and image decoding (``TFRecordDataset(batching=Batching(...))``).

    Attributes:
        drop_last: in batch mode (``batch_size=``), drop each epoch's final short batch.
        images: image decoding: True (default options), an :class:`ImageBatching`
            (threads, layout, JPEG decoder, fused crop, normalisation, fixed
            size, padding), or False to decode and transform each image as
            torchvision would, then stack. In batch mode it drives the image
            fast path; in both modes ``False`` or ``ImageBatching(fused=False)``
            also stop a leading crop of the transform being fused into decoding.
        prefetch: in batch mode, the batches a producer thread reads,
            parses and starts decoding ahead of the one the loop takes (in
            each DataLoader worker, or in the main process with
            ``num_workers=0``). What of ``transform=`` is not fused into
            decoding runs when the loop takes the batch, on its thread, so
            the batches and every draw from torch's global generator are the
            same as with ``prefetch=0``. Memory: up to ``prefetch`` batches
            more per reader (a batch of 64 RGB 224x224 uint8 images is 9.6 MB,
            256x256 12.6 MB) besides their encoded records. 0: no thread;
            the next batch is read while the one before decodes.
    """

    drop_last: bool = False
    images: ImageBatching | bool = True
    prefetch: int = 2

    def __post_init__(self) -> None:
        check_flag("Batching.drop_last", self.drop_last)
        check_int("Batching.prefetch", self.prefetch, minimum=0)
        if not isinstance(self.images, (bool, ImageBatching)):
            raise ValueError(f"images must be True, False or an ImageBatching, got {self.images!r}")

    @property
    def image_options(self) -> ImageBatching | None:
        """The image fast path's options; None when it is off."""
        return ImageBatching() if self.images is True else self.images or None


class DatasetOptions(NamedTuple):
    """The option objects of a :class:`~tfrecord_torch.TFRecordDataset`,
    checked, each one not given at its defaults."""

    shuffling: Shuffling
    sharding: Sharding
    source: Source
    batching: Batching


def dataset_options(*, batch_size: int | None, shuffle: bool | Shuffling, sharding: Sharding | None,
                    source: Source | None, batching: Batching | None) -> DatasetOptions:
    """:class:`DatasetOptions` of the dataset's arguments (``shuffle``: a flag
    or a :class:`Shuffling`), after checking them and ``batch_size``."""
    check_int("batch_size", batch_size, minimum=1, optional=True)
    if not isinstance(shuffle, Shuffling):
        check_flag("shuffle", shuffle)
    return DatasetOptions(shuffle if isinstance(shuffle, Shuffling) else Shuffling(),
                          check_instance("sharding", sharding or Sharding(), Sharding, "a Sharding"),
                          check_instance("source", source or Source(), Source, "a Source"),
                          check_instance("batching", batching or Batching(), Batching, "a Batching"))


# old keyword of TFRecordDataset -> (its new keyword, the option object's spelling)
MOVED = {
    "shuffle_block": ("shuffle", "Shuffling(block={value!r})"),
    "shuffle_buffer": ("shuffle", "Shuffling(buffer={value!r})"),
    "cycle_length": ("shuffle", "Shuffling(cycle_length={value!r})"),
    "rank": ("sharding", "Sharding(rank={value!r}, world_size=...)"),
    "world_size": ("sharding", "Sharding(rank=..., world_size={value!r})"),
    "even": ("sharding", "Sharding(even={value!r})"),
    "index": ("source", "Source(index={value!r})"),
    "lengths": ("source", "Source(lengths={value!r})"),
    "compression": ("source", "Source(compression={value!r})"),
    "verify": ("source", "Source(verify={value!r})"),
    "progress": ("source", "Source(progress={value!r})"),
    "drop_last": ("batching", "Batching(drop_last={value!r})"),
    "images": ("batching", "Batching(images={value!r})"),
}


def refuse_moved_keywords(owner: str, given: dict[str, Any]) -> None:
    """TypeError naming the new spelling of a keyword that moved into an option object."""
    refuse_moved(owner, given, MOVED)
