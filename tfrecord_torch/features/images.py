"""Decoding encoded images to uint8 tensors [C, H, W].

torchvision decodes JPEG, GIF and WebP; Pillow decodes PNG and everything
else it knows (BMP, TIFF, ...). PNG goes to Pillow because torchvision's PNG
decoder crashes the process (a segfault in libpng's error path) on a PNG
with a bad zlib checksum; mutation fuzzing found no such crash for its JPEG,
GIF and WebP decoders. The format is detected from the bytes. An image whose
header declares more than MAX_IMAGE_PIXELS pixels is refused before any
pixel buffer is allocated (decompression bombs).
"""

from __future__ import annotations

import io
import logging
import sys
import warnings

import numpy as np
import torch

__all__ = ["MAX_IMAGE_PIXELS", "decode_image", "image_info", "image_size", "preload"]

log = logging.getLogger(__name__)
MAX_IMAGE_PIXELS = 1 << 28


def decode_image(data: bytes, mode: str = "RGB") -> torch.Tensor:
    """Decode encoded image bytes to a uint8 tensor [C, H, W]."""
    if _torchvision_can(data) and _torchvision_usable():
        from torchvision.io import ImageReadMode
        from torchvision.io import decode_image as tv_decode

        modes = {"RGB": ImageReadMode.RGB, "L": ImageReadMode.GRAY, "RGBA": ImageReadMode.RGB_ALPHA,
                 "unchanged": ImageReadMode.UNCHANGED}
        _check_size(data)
        with warnings.catch_warnings():  # torchvision 0.29 announces a move to torchcodec
            warnings.simplefilter("ignore", DeprecationWarning)
            return tv_decode(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=modes[mode])
    return _pillow_decode(data, mode)


def preload() -> None:
    """Import torchvision's decoders now, in the main process, so DataLoader
    workers forked from it do not each pay the import (about a second and a
    half) at their first image, every epoch."""
    if _torchvision_usable():
        import torchvision.io  # noqa: F401


def _torchvision_usable() -> bool:
    """False when importing torchvision now would crash the process.

    torchvision's import pulls in triton (shipped with CUDA builds of torch),
    and loading triton's library after TensorFlow's segfaults. So once
    TensorFlow is loaded and torchvision is not, images decode with Pillow.
    """
    if "torchvision.io" in sys.modules or "tensorflow" not in sys.modules:
        return True
    global _WARNED
    if not _WARNED:
        _WARNED = True
        log.warning("TensorFlow was imported before torchvision: decoding images with Pillow "
                    "(importing torchvision after TensorFlow crashes when triton is installed; "
                    "import torchvision first to use its decoders)")
    return False


_WARNED = False


def _torchvision_can(data: bytes) -> bool:
    return data[:3] == b"\xff\xd8\xff" or data[:4] == b"GIF8" or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")


def _check_size(data: bytes) -> None:
    """Refuse images whose header declares an absurd pixel count, before any allocation."""
    size = image_size(data)
    if size is None:
        from PIL import Image as PILImage

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with PILImage.open(io.BytesIO(data)) as im:
                size = im.size
    width, height = size
    if width * height > MAX_IMAGE_PIXELS:
        raise ValueError(f"image of {width}x{height} pixels exceeds the limit of {MAX_IMAGE_PIXELS}")


def image_info(data: bytes) -> tuple[int, int, int] | None:
    """(width, height, channels) from a PNG or JPEG header, or None for other
    formats (palette PNGs count 3 channels, or 4 with transparency)."""
    size = image_size(data)
    if size is None:
        return None
    if data[:4] == b"\x89PNG":
        color = data[25] if len(data) > 25 else 2
        channels = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(color, 3)
        if color == 3 and b"tRNS" in data[:data.find(b"IDAT")]:
            channels = 4
        return size[0], size[1], channels
    pos, n = 2, len(data)
    while pos + 10 <= n and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return size[0], size[1], {1: 1, 3: 3, 4: 4}.get(data[pos + 9], 3)
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG or JPEG header, or None for other formats."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:2] != b"\xff\xd8":
        return None
    pos, n = 2, len(data)
    while pos + 9 <= n and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(data[pos + 7:pos + 9], "big"), int.from_bytes(data[pos + 5:pos + 7], "big")
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    raise ValueError("JPEG header has no frame size (truncated or corrupt)")


def _pillow_decode(data: bytes, mode: str) -> torch.Tensor:
    from PIL import Image as PILImage

    if data[:8] == b"\x89PNG\r\n\x1a\n":
        _check_size(data)
    with PILImage.open(io.BytesIO(data)) as im:
        if im.size[0] * im.size[1] > MAX_IMAGE_PIXELS:
            raise ValueError(f"image of {im.size[0]}x{im.size[1]} pixels exceeds the limit")
        converted = im if mode == "unchanged" else im.convert(mode)
        array = np.array(converted)  # a writable copy: torch refuses read-only arrays
    if array.dtype != np.uint8:
        raise ValueError(f"decoded to {array.dtype}, not 8-bit pixels")
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


