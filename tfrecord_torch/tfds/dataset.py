"""Opening a split of a TFDS-prepared directory as a dataset."""

from __future__ import annotations

import dataclasses
from typing import Any

from tfrecord_torch._types import PathLike
from tfrecord_torch.data.iterable import TFRecordDataset
from tfrecord_torch.data.mapstyle import IndexedTFRecordDataset
from tfrecord_torch.data.options import Source
from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.records.compression import compression_from_name
from tfrecord_torch.tfds.features import ClassLabel, tfds_features
from tfrecord_torch.tfds.features import boxes_on as tfds_boxes_on
from tfrecord_torch.tfds.metadata import read_info, supervised_keys, tfds_split

__all__ = ["tfds_dataset"]


def tfds_dataset(directory: PathLike, split: str = "train", *, map_style: bool = False,
                 features: dict | None = None, as_supervised: bool = False, boxes_on: str | None = None,
                 **kwargs: Any) -> TFRecordDataset | IndexedTFRecordDataset:
    """Open one split of a TFDS-prepared directory (or of our converter's output)
    without TensorFlow.

    Args:
        directory: the folder with ``dataset_info.json`` (``data_dir/name/version``).
        split: the split name.
        map_style: an :class:`IndexedTFRecordDataset` instead of a
            :class:`TFRecordDataset` (uncompressed shards only).
        features: a spec to use instead of the one derived from ``features.json``.
        as_supervised: items are ``(input, target)`` tuples of the two features
            ``supervisedKeys`` names (as ``tfds.load(as_supervised=True)``); a
            ``transform=`` then receives that tuple.
        boxes_on: the Image feature that the BBoxFeatures lie on: they then
            come as ``tv_tensors.BoundingBoxes`` [N, 4] (XYXY pixels on that
            image's canvas), which v2 transforms move with it; by default the
            stored normalised ``[ymin, xmin, ymax, xmax]`` float32, as
            ``tfds.as_numpy`` gives them.
        kwargs: passed on to the dataset.

    The dataset gets ``features`` (the spec; a ClassLabel feature's ``.names``
    are its class names) and ``classes`` (the class names of the supervised
    target, or of the only ClassLabel; None if there are none). The shard
    lengths in ``dataset_info.json`` give ``len()`` without reading anything;
    shards without index files are indexed when first read (a progress bar
    while they are: ``source=Source(progress=...)``), and a shard holding another count is an
    error naming it (map-style: checked at once).
    """
    storage_options = kwargs.get("storage_options")
    paths, lengths = tfds_split(directory, split, storage_options)
    spec = tfds_features(directory, storage_options) if features is None else features
    if boxes_on is not None:
        spec = tfds_boxes_on(spec, boxes_on)
    pair = supervised_keys(read_info(directory, storage_options))
    if as_supervised:
        if pair is None:
            raise ValueError(f"as_supervised=True, but {directory}/dataset_info.json has no supervisedKeys")
        if kwargs.get("batch_size") is not None:
            raise ValueError("as_supervised=True gives one (input, target) tuple per record; use it "
                             "without batch_size")
        missing = [k for k in pair if k not in spec]
        if missing:
            raise ValueError(f"supervisedKeys {pair} name features the spec lacks: {missing}")
        kwargs["transform"] = _Supervised(pair, kwargs.get("transform"))
    if map_style:
        dataset: TFRecordDataset | IndexedTFRecordDataset = IndexedTFRecordDataset(paths, features=spec, **kwargs)
    else:  # len() from shardLengths; the shards are indexed when first read (compressed ones streamed)
        known = lengths if lengths and not any(compression_from_name(p) for p in paths) else None
        source = kwargs.pop("source", None) or Source()
        if known is not None and isinstance(source, Source) and source.lengths is None:
            source = dataclasses.replace(source, lengths=known)
        dataset = TFRecordDataset(paths, features=spec, source=source, **kwargs)
    labels = [f for f in spec.values() if isinstance(f, ClassLabel)]
    target = spec.get(pair[1]) if pair is not None else None
    named = target if isinstance(target, ClassLabel) else labels[0] if len(labels) == 1 else None
    dataset.features = spec  # type: ignore[union-attr]
    dataset.classes = named.names if named is not None else None  # type: ignore[union-attr]
    counts = [len(i) for i in dataset.indexes] if map_style else None  # (TFRecordDataset: when indexed)
    if counts is not None and counts != lengths:
        raise TFRecordError(f"{directory}: dataset_info.json lists shard lengths {lengths} for "
                            f"{split!r}, but the shards hold {counts}")
    return dataset


class _Supervised:
    """Turns a decoded record into its (input, target) pair, then applies the user's transform."""

    def __init__(self, keys: tuple[str, str], transform: Any = None) -> None:
        self.keys, self.transform = keys, transform

    def __call__(self, item: dict) -> Any:
        pair = (item[self.keys[0]], item[self.keys[1]])
        return pair if self.transform is None else self.transform(pair)
