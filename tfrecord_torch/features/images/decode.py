"""Decoding encoded images to tensors [C, H, W], as TensorFlow decodes them.

The channel choice follows ``tf.io.decode_image(channels=...)``: "unchanged"
(TF's ``channels=0``) keeps the stored layout -- gray, gray+alpha, RGB, RGBA;
palettes expanded to RGB, or RGBA when a colour is transparent; CMYK JPEGs
converted to RGB -- and keeps 16-bit PNG samples as ``torch.uint16``. "L",
"RGB" and "RGBA" convert with TensorFlow's arithmetic (:mod:`.channels`).
Where TensorFlow refuses a choice (channels=1 or 4 for a GIF, 1 for WebP or a
CMYK JPEG) the same arithmetic applies; RGBA from a JPEG is refused, as in TF.

Decoders: torchvision for JPEG (libjpeg's accurate integer IDCT, equal to
``dct_method="INTEGER_ACCURATE"``), GIF and WebP; Pillow for PNG (torchvision's
PNG decoder crashes the process on a bad zlib checksum) and the rest, and for
everything when TensorFlow was imported before torchvision. Every image's
header is read and checked against the pixel limits before any decoding
(:mod:`.limits`); an animated GIF is cut after its first frame unless all
frames are asked for.
"""

from __future__ import annotations

import logging
import sys
import warnings

import numpy as np
import torch

from tfrecord_torch.features.images.channels import MODE_CHANNELS, convert_channels, to_uint8
from tfrecord_torch.features.images.limits import (
    MAX_IMAGE_PIXELS,
    Header,
    check_pixels,
    image_info,
    image_size,
    read_header,
)
from tfrecord_torch.features.images.pillow import pillow_frames

__all__ = ["FRAMES", "IMAGE_MODES", "MAX_IMAGE_PIXELS", "decode_image", "image_info", "image_size", "preload"]

log = logging.getLogger(__name__)
IMAGE_MODES = ("RGB", "L", "RGBA", "unchanged")
FRAMES = ("first", "all")
_ANIMATED = ("gif", "webp")  # formats TF's decode_image(expand_animations=True) gives 4-D
_WARNED = False  # the Pillow fallback after TensorFlow has been logged once


def decode_image(data: bytes, mode: str = "RGB", *, frames: str = "first") -> torch.Tensor:
    """Decode encoded image bytes as TensorFlow does.

    Args:
        data: the encoded image (PNG, JPEG, GIF, WebP, BMP, TIFF, ...).
        mode: "RGB" (C=3), "L" (C=1), "RGBA" (C=4) or "unchanged" (the stored
            layout; 16-bit PNGs stay 16-bit).
        frames: "first" (the first frame of an animation) or "all" (GIF and
            WebP give [N, C, H, W], like ``decode_image(expand_animations=True)``).

    Returns:
        uint8 tensor [C, H, W] (uint16 for a 16-bit PNG with mode="unchanged"),
        or [N, C, H, W] for GIF and WebP with frames="all".

    Raises:
        ValueError: corrupt bytes, an image over the pixel limits, or a mode
            the format cannot honour (RGBA from a JPEG).
    """
    header = read_header(data)
    fmt = header.format
    animation = frames == "all" and fmt in _ANIMATED  # other formats give their first frame (page)
    check_pixels(header, header.frames if animation else 1)
    if fmt == "jpeg" and mode == "RGBA":
        raise ValueError("a JPEG has no alpha channel, so mode='RGBA' cannot be honoured (TensorFlow "
                         "refuses channels=4 for JPEG too); use mode='RGB'")
    if fmt == "gif" and frames == "first" and header.frames > 1:
        data = data[:header.first_frame_end] + b";"  # giflib would decode every frame
    torchvision_reads = fmt in ("jpeg", "gif") or (fmt == "webp" and header.frames == 1)  # not animated WebP
    if torchvision_reads and _torchvision_usable():
        arrays = _torchvision(data, header, mode)
    else:
        arrays = pillow_frames(data, all_frames=animation, gray_jpeg=mode == "L", key_alpha=mode == "RGBA")
    want = None if mode == "unchanged" else MODE_CHANNELS[mode]
    out = []
    for array in arrays:
        if want is not None:
            array = to_uint8(convert_channels(array, want))
        if not array.flags.writeable:  # Pillow's arrays are read-only
            array = array.copy()
        # [C, H, W] over the [H, W, C] buffer, no copy: the strides torchvision's decoders give too
        out.append(torch.from_numpy(array).permute(2, 0, 1))
    if animation:
        return torch.stack(out)
    return out[0]


def _torchvision(data: bytes, header: Header, mode: str) -> list[np.ndarray]:
    """Frames [H, W, C] from torchvision, libjpeg doing JPEG's own channel conversions."""
    from torchvision.io import ImageReadMode
    from torchvision.io import decode_image as tv_decode

    read = ImageReadMode.RGB
    if header.format == "jpeg" and (mode == "L" or (mode == "unchanged" and header.channels == 1)) \
            and header.channels != 4:  # libjpeg's luma, as TF's channels=1; TF refuses it for CMYK
        read = ImageReadMode.GRAY
    elif header.format == "webp" and mode in ("RGBA", "unchanged"):
        read = ImageReadMode.RGB_ALPHA if mode == "RGBA" else ImageReadMode.UNCHANGED
    with warnings.catch_warnings():  # torchvision 0.29 announces a move to torchcodec
        warnings.simplefilter("ignore", DeprecationWarning)
        tensor = tv_decode(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=read)
    if tensor.dim() == 3:
        tensor = tensor[None]
    return [frame.permute(1, 2, 0).numpy() for frame in tensor]


def preload() -> None:
    """Import torchvision's decoders now, in the main process, so DataLoader
    workers forked from it do not each pay the import (about a second and a
    half) at their first image, every epoch; and tv_tensors, which wraps
    the decoded images."""
    if _torchvision_usable():
        import torchvision.io  # noqa: F401
        import torchvision.tv_tensors  # noqa: F401


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
