"""Encoding one source sample as a record payload (the converter's record schema).

Record schema (every record):

| key | kind | holds |
|---|---|---|
| ``image`` | bytes | the encoded image (PNG / JPEG / the original file's bytes), or raw HWC uint8 pixels |
| ``format`` | bytes | ``png``, ``jpeg``, ``gif``, ``webp``, ``bmp``, ``tiff``, ... or ``raw`` |
| ``height``, ``width``, ``channels`` | int64 | the image's size |
| ``label`` | int64 | the class index (-1 if the dataset has no labels) |

Detection samples use the TF Object Detection API's keys (see ``detection.py``).
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from tfrecord_torch.errors import TFRecordError
from tfrecord_torch.example.codec import make_example
from tfrecord_torch.features.images.decode import image_info
from tfrecord_torch.write.detection import detection_record, is_detection_target
from tfrecord_torch.write.png16 import encode_png16

__all__ = ["FORMATS", "encode_sample", "file_samples", "rgb8_png"]

FORMATS = ("png", "jpeg", "raw")
_MAGIC = [(b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF8", "gif"),
          (b"BM", "bmp"), (b"II*\x00", "tiff"), (b"MM\x00*", "tiff")]


def file_samples(dataset: Any) -> list[tuple[str, int]] | None:
    """``(absolute path, label)`` of each sample of a dataset that exposes its
    files (ImageFolder's ``samples``) and has no transform, else None: such a
    dataset is copied byte for byte, without decoding."""
    samples = getattr(dataset, "samples", None)
    if samples is None or getattr(dataset, "transform", None) is not None or \
            getattr(dataset, "transforms", None) is not None:
        return None
    if all(isinstance(s, (tuple, list)) and len(s) == 2 and isinstance(s[0], (str, os.PathLike))
           for s in samples[:1]):
        return [(os.path.abspath(os.fspath(p)), int(label)) for p, label in samples]
    return None


def encode_sample(i: int, dataset, files, options) -> tuple[bytes, tuple]:
    """The record payload of sample ``i`` and (format, height, width, channels, label, dtype)."""
    if files is not None:
        path, label = files[i]
        with open(path, "rb") as f:
            data = f.read()
        fmt, (h, w, c) = _sniff(data, path)
        dtype = "uint16" if fmt == "png" and data[24:25] == b"\x10" else "uint8"  # IHDR bit depth
        if dtype == "uint16" and options.get("rgb8"):  # a split of 8- and 16-bit files: see rgb8_png
            data, c, dtype = rgb8_png(data, path), 3, "uint8"
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


def rgb8_png(data: bytes, path: str) -> bytes:
    """A 16-bit image file as the 8-bit RGB PNG of the pixels torchvision's ImageFolder
    gives for it (its loader's ``PIL.Image.open(path).convert("RGB")``, whatever Pillow
    makes of 16-bit samples there), for a split whose other images are 8-bit: TFDS keeps
    one dtype per feature, and the 8-bit images must not be read as 16-bit."""
    from PIL import Image as PILImage

    try:
        with PILImage.open(io.BytesIO(data)) as im:
            rgb = im.convert("RGB")
    except Exception as e:  # Pillow raises many types for bad files
        raise TFRecordError(f"{path}: not an image Pillow can read: {e}") from e
    buf = io.BytesIO()
    rgb.save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


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

