"""Converting torchvision datasets (and any (image, label) dataset) to shards.

Record schema (every record):

| key | kind | holds |
|---|---|---|
| ``image`` | bytes | the encoded image (PNG / JPEG / the original file's bytes), or raw HWC uint8 pixels |
| ``format`` | bytes | ``png``, ``jpeg``, ``gif``, ``webp``, ``bmp``, ``tiff``, ... or ``raw`` |
| ``height``, ``width``, ``channels`` | int64 | the image's size |
| ``label`` | int64 | the class index (-1 if the dataset has no labels) |
"""

from __future__ import annotations

import io
import multiprocessing
import os
from typing import Any

import numpy as np

from tfrecord_torch._types import CompressionArg, PathLike
from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.example.codec import make_example
from tfrecord_torch.features.images import image_info
from tfrecord_torch.tfds.metadata import check_dataset_name, image_feature, raw_image_feature, write_metadata
from tfrecord_torch.write.detection import (
    detection_features,
    detection_record,
    is_detection_target,
    tensor_feature,
)
from tfrecord_torch.write.png16 import encode_png16
from tfrecord_torch.write.sharded import ShardedWriter

__all__ = ["FORMATS", "encode_sample", "write_dataset"]

FORMATS = ("png", "jpeg", "raw")
_CHUNK = 64  # samples per task sent to an encoding process
_MAGIC = [(b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF8", "gif"),
          (b"BM", "bmp"), (b"II*\x00", "tiff"), (b"MM\x00*", "tiff")]


def write_dataset(dataset: Any, output_dir: PathLike, *, name: str, split: str = "train", image_format: str = "png",
                  quality: int = 95, shard_size: int = 10_000, max_shard_bytes: int | None = None,
                  compression: CompressionArg = None, num_workers: int = 0, class_names: list[str] | None = None,
                  progress: bool = True, storage_options: dict | None = None) -> list[str]:
    """Write a dataset of images and labels as TFDS-style sharded TFRecords.

    Args:
        dataset: a map-style dataset yielding ``(image, label)`` or dicts with
            ``"image"`` and ``"label"``; images as PIL images, uint8 tensors
            [C, H, W] / [H, W] or uint8 arrays [H, W, C] / [H, W]. A dataset that
            exposes its files (ImageFolder's ``samples``) and has no transform
            is copied byte for byte, without decoding.
        output_dir: the folder for shards, indexes and TFDS metadata.
        name, split: TFDS dataset and split names.
        image_format: for decoded pixels: "png" (lossless, default), "jpeg"
            (``quality``) or "raw" (HWC bytes with the shape).
        shard_size, max_shard_bytes: when to start a new shard.
        compression: None or "gzip". tf.data reads GZIP shards (with
            ``compression_type="GZIP"``) but TFDS and random access need
            uncompressed ones; only those get indexes.
        num_workers: processes encoding in parallel (0: in this process). The
            output is byte-identical whatever the number.
        class_names: label names for the metadata (default: ``dataset.classes``).
        progress: show a progress bar.
        storage_options: fsspec options when ``output_dir`` is a URL.

    Returns:
        The shard paths.

    Raises:
        TypeError: a sample cannot be converted; the message names its index.
    """
    if compression not in (None, "gzip"):
        raise ValueError(f"compression must be one of (None, 'gzip'), got {compression!r}")
    if image_format not in FORMATS:
        raise ValueError(f"image_format must be one of {FORMATS}, got {image_format!r}")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in [1, 100], got {quality!r}")
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
    files = _file_samples(dataset)
    class_names = class_names if class_names is not None else _classes(dataset)
    options = {"format": image_format, "quality": quality, "class_names": class_names}
    total = len(dataset)
    stats = _Stats()
    check_dataset_name(output_dir, name, storage_options)  # before any shard, not after all of them
    with ShardedWriter(output_dir, name=name, split=split, max_records=shard_size,
                       max_bytes=max_shard_bytes, compression=compression,
                       storage_options=storage_options) as writer:
        for payload, meta in _encoded(dataset, files, options, total, num_workers, progress):
            writer.write(payload)
            stats.add(meta)
        paths = writer.close()
    write_metadata(output_dir, name=name, split=split, shard_lengths=writer.shard_lengths,
                   num_bytes=writer.num_bytes, features=stats.features(image_format if not files else None, class_names),
                   class_names=class_names, compression=compression, storage_options=storage_options)
    return paths


def _classes(dataset) -> list[str] | None:
    classes = getattr(dataset, "classes", None)
    return [str(c) for c in classes] if classes is not None else None


def _file_samples(dataset) -> list | None:
    samples = getattr(dataset, "samples", None)
    if samples is None or getattr(dataset, "transform", None) is not None or \
            getattr(dataset, "transforms", None) is not None:
        return None
    if all(isinstance(s, (tuple, list)) and len(s) == 2 and isinstance(s[0], (str, os.PathLike))
           for s in samples[:1]):
        return [(os.fspath(p), int(label)) for p, label in samples]
    return None


class _Stats:
    """What the metadata needs: channels, shapes, formats and sample dtypes seen."""

    def __init__(self) -> None:
        self.channels: set[int] = set()
        self.shapes: set[tuple] = set()
        self.formats: set[str] = set()
        self.dtypes: set[str] = set()
        self.max_label = -1
        self.detection = self.text = False

    def add(self, meta) -> None:
        fmt, h, w, c, label, dtype = meta
        self.channels.add(c)
        self.shapes.add((h, w))
        self.formats.add(fmt)
        self.dtypes.add(dtype)
        if isinstance(label, tuple):  # a detection sample: (has class names,)
            self.detection, self.text = True, label[0]
        else:
            self.max_label = max(self.max_label, label)

    def features(self, image_format: str | None, class_names: list | None) -> dict:
        classes = len(class_names) if class_names is not None else self.max_label + 1
        label = {"classLabel": {"numClasses": str(classes)},
                 "pythonClassName": "tensorflow_datasets.core.features.class_label_feature.ClassLabel"}
        channels = self.channels.pop() if len(self.channels) == 1 else None
        shape = self.shapes.pop() if len(self.shapes) == 1 else (None, None)
        dtype = "uint16" if "uint16" in self.dtypes else "uint8"
        fmt = self.formats.pop() if len(self.formats) == 1 else None
        if self.detection:
            return detection_features(channels, fmt, self.text)
        out = {"label": label}
        if image_format == "raw":
            # Variable sizes: a flat vector (TFDS's Tensor takes one unknown dimension without
            # a layout of its own), with the size features every record holds to reshape it.
            fixed = channels is not None and None not in shape
            out["image"] = raw_image_feature(tuple(shape) + (channels,) if fixed else (None,), dtype)
            out.update({k: tensor_feature("int64", []) for k in ("height", "width", "channels")})
        else:
            out["image"] = image_feature(channels or 3, fmt, shape, dtype)
        return out


def _encoded(dataset, files, options, total, num_workers, progress):
    from tqdm import tqdm

    chunks = [(start, min(start + _CHUNK, total)) for start in range(0, total, _CHUNK)]
    bar = tqdm(total=total, unit="img", disable=not progress, desc="converting")
    try:
        if num_workers == 0:
            _init(dataset, files, options)
            results = map(_encode_range, chunks)
            for batch in results:
                yield from batch
                bar.update(len(batch))
            return
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                         else "spawn")
        with ctx.Pool(num_workers, initializer=_init, initargs=(dataset, files, options)) as pool:
            for batch in pool.imap(_encode_range, chunks):  # in order: output does not depend on workers
                yield from batch
                bar.update(len(batch))
    finally:
        bar.close()
        _STATE.clear()  # do not keep the dataset alive after the conversion


_STATE: dict[str, Any] = {}


def _init(dataset, files, options) -> None:
    _STATE.update(dataset=dataset, files=files, options=options)


def _encode_range(bounds: tuple[int, int]) -> list:
    start, stop = bounds
    return [encode_sample(i, _STATE["dataset"], _STATE["files"], _STATE["options"]) for i in range(start, stop)]


def encode_sample(i: int, dataset, files, options) -> tuple[bytes, tuple]:
    """The record payload of sample ``i`` and (format, height, width, channels, label, dtype)."""
    if files is not None:
        path, label = files[i]
        with open(path, "rb") as f:
            data = f.read()
        fmt, (h, w, c) = _sniff(data, path)
        dtype = "uint16" if fmt == "png" and data[24:25] == b"\x10" else "uint8"  # IHDR bit depth
    else:
        image, label = _split(dataset[i], i)
        pixels = _pixels(image, i)
        h, w, c = pixels.shape
        fmt, dtype = options["format"], str(pixels.dtype)
        try:
            data = _encode(pixels, fmt, options["quality"])
        except TypeError as e:
            raise TypeError(f"sample {i}: {e}") from None
    if is_detection_target(label):  # (image, {"boxes", "labels"}): the OD API's layout
        names = options.get("class_names")
        record = detection_record(data, fmt, h, w, label, i, names)
        return make_example(record), (fmt, h, w, c, (names is not None,), dtype)
    label = -1 if label is None else _label(label, i)
    record = {"image": data, "format": fmt, "height": h, "width": w, "channels": c, "label": label}
    return make_example(record), (fmt, h, w, c, label, dtype)


def _split(sample, i: int):
    if isinstance(sample, dict):
        if "image" not in sample:
            raise TypeError(f"sample {i}: a dict sample needs an 'image' key, got {sorted(sample)}")
        return sample["image"], sample.get("label")
    if isinstance(sample, (tuple, list)) and len(sample) == 2:
        return sample
    if isinstance(sample, (tuple, list)):
        raise TypeError(f"sample {i}: expected (image, label), got a {type(sample).__name__} of {len(sample)}")
    return sample, None


def _label(label, i: int) -> int:
    if hasattr(label, "item"):
        label = label.item()
    if isinstance(label, (bool, float)) or not isinstance(label, (int, np.integer)):
        raise TypeError(f"sample {i}: label must be an int, got {type(label).__name__} {label!r}")
    return int(label)


def _pixels(image, i: int) -> np.ndarray:
    """An image as a uint8 or uint16 array [H, W, C] (16-bit images stay 16-bit)."""
    from PIL import Image as PILImage

    if isinstance(image, PILImage.Image):
        if image.mode.startswith("I;16"):
            image = np.asarray(image).astype(np.uint16)
        elif image.mode not in ("L", "RGB", "RGBA"):
            image = image.convert("RGBA" if "A" in image.mode else "RGB")
        array = np.asarray(image)
    elif hasattr(image, "detach") and hasattr(image, "numpy"):
        array = image.detach().cpu().numpy()
        if array.ndim == 3:
            array = array.transpose(1, 2, 0)  # tensors are [C, H, W]
    elif isinstance(image, np.ndarray):
        array = image
    else:
        raise TypeError(f"sample {i}: cannot convert an image of type {type(image).__name__} "
                        "(use a PIL image, a uint8 tensor [C, H, W] or a uint8 array [H, W, C])")
    if array.dtype not in (np.uint8, np.uint16):
        raise TypeError(f"sample {i}: image dtype is {array.dtype}, expected uint8 or uint16")
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3, 4) or 0 in array.shape:
        raise TypeError(f"sample {i}: image shape {array.shape} is not [H, W, C] with C in 1, 3, 4")
    return np.ascontiguousarray(array)


def _encode(pixels: np.ndarray, fmt: str, quality: int) -> bytes:
    if fmt == "raw":
        return pixels.astype(pixels.dtype.newbyteorder("<")).tobytes()  # tf.io.decode_raw's order
    if pixels.dtype == np.uint16:
        if fmt != "png":
            raise TypeError("JPEG cannot store 16-bit samples; use image_format='png' or 'raw'")
        return encode_png16(pixels)
    from PIL import Image as PILImage

    image = PILImage.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels)
    buf = io.BytesIO()
    if fmt == "png":
        image.save(buf, format="PNG", compress_level=6)
    else:
        if pixels.shape[2] == 4:
            raise TypeError("JPEG cannot store an alpha channel; use image_format='png'")
        image.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def _sniff(data: bytes, path: str) -> tuple[str, tuple[int, int, int]]:
    """Format and (height, width, channels) of an image file's bytes, from its header."""
    from PIL import Image as PILImage

    fmt = next((f for magic, f in _MAGIC if data.startswith(magic)), None)
    if fmt is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        fmt = "webp"
    if fmt in ("png", "jpeg"):  # the common case: read the header, not the whole file with Pillow
        try:
            info = image_info(data)
        except ValueError:
            info = None
        if info is not None and info[0] > 0 and info[1] > 0:
            return fmt, (info[1], info[0], info[2])
    try:
        with PILImage.open(io.BytesIO(data)) as im:
            w, h = im.size
            c = {"1": 1, "L": 1, "I": 1, "I;16": 1, "F": 1, "LA": 2, "RGBA": 4, "PA": 4}.get(im.mode, 3)
            if im.mode == "P" and "transparency" in im.info:
                c = 4
            fmt = fmt or (im.format or "unknown").lower()
    except Exception as e:  # Pillow raises many types for bad files
        raise TFRecordError(f"{path}: not an image Pillow can read: {e}") from e
    return fmt, (h, w, c)

