"""Opening a split of a TFDS-prepared directory as a dataset."""

from __future__ import annotations

from typing import Any

from tfrecord_torch._types import PathLike
from tfrecord_torch.data.iterable import TFRecordDataset
from tfrecord_torch.data.mapstyle import IndexedTFRecordDataset
from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.tfds.features import tfds_features
from tfrecord_torch.tfds.metadata import tfds_split

__all__ = ["tfds_dataset"]


def tfds_dataset(directory: PathLike, split: str = "train", *, map_style: bool = False,
                 features: dict | None = None, **kwargs: Any) -> TFRecordDataset | IndexedTFRecordDataset:
    """Open one split of a TFDS-prepared directory (or of our converter's output)
    without TensorFlow.

    Args:
        directory: the folder with ``dataset_info.json`` (``data_dir/name/version``).
        split: the split name.
        map_style: an :class:`IndexedTFRecordDataset` instead of a
            :class:`TFRecordDataset` (uncompressed shards only).
        features: a spec to use instead of the one derived from ``features.json``.
        kwargs: passed on to the dataset.

    The shard lengths in ``dataset_info.json`` are checked against the shards.
    """
    so = kwargs.get("storage_options")
    paths, lengths = tfds_split(directory, split, so)
    spec = tfds_features(directory, so) if features is None else features
    cls = IndexedTFRecordDataset if map_style else TFRecordDataset
    dataset = cls(paths, features=spec, **kwargs)
    counts = [len(i) for i in dataset.indexes] if not getattr(dataset, "streamed", False) else None
    if counts is not None and counts != lengths:
        raise TFRecordError(f"{directory}: dataset_info.json lists shard lengths {lengths} for "
                            f"{split!r}, but the shards hold {counts}")
    return dataset
