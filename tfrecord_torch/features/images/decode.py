"""Decoding encoded images to tensors [C, H, W], as TensorFlow decodes them.

The channel choice follows ``tf.io.decode_image(channels=...)``: "unchanged"
(TF's ``channels=0``) keeps the stored layout -- gray, gray+alpha, RGB, RGBA;
palettes expanded to RGB, or RGBA when a colour is transparent; CMYK JPEGs
converted to RGB -- and keeps 16-bit PNG samples as ``torch.uint16``. "L",
"RGB" and "RGBA" convert with TensorFlow's arithmetic (:mod:`.channels`).
Where TensorFlow refuses a choice (channels=1 or 4 for a GIF, 1 for WebP or a
CMYK JPEG) the same arithmetic applies; RGBA from a JPEG is refused, as in TF.

JPEG decoders (``decoder=``): "accurate" (the default) is libjpeg's accurate
integer IDCT, ``dct_method="INTEGER_ACCURATE"``'s and torchvision's pixels;
"fast" is its fast integer IDCT, the pixels of TF's default ``dct_method``
(``tf.io.decode_jpeg(data)``, ``tf.io.decode_image``), which only
libjpeg-turbo through simplejpeg gives: every JPEG takes that path
(:func:`.jpeg.decode_jpeg_fast`), CMYK and corrupt ones too, with no
fallback. "accurate" and every other format take these decoders:

For gray, YCbCr and RGB JPEGs of 8 bits, libjpeg-turbo through
simplejpeg with the accurate integer IDCT (``dct_method="INTEGER_ACCURATE"``,
and torchvision's ``decode_jpeg``); torchvision for the other JPEGs (CMYK),
for the JPEGs libjpeg only decodes with a warning (corrupt data it papers
over, as torchvision and TensorFlow do), GIF and WebP; Pillow for PNG
(torchvision's PNG decoder crashes the process on a bad zlib checksum) and
the rest, and for everything but those JPEGs when TensorFlow was imported
before torchvision. Every image's header is read and checked against the
pixel limits before any decoding (:mod:`.limits`); an animated GIF is cut
after its first frame unless all frames are asked for.

Layout: :func:`decode_image` gives C-contiguous planes [C, H, W], which a
batch stacks with plain copies (an RGB JPEG decoded straight into them by
the compiled helper, :func:`.jpeg.decode_jpeg_planes`, where it is built);
:func:`decode_pixels` can give instead the [C, H, W] view of the decoded
[H, W, C] buffer (channels-last strides, as torchvision's decoders give),
which torch's antialiased resize reads without repacking it.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import numpy as np
import torch

from tfrecord_torch._args import check_choice
from tfrecord_torch.features.images.channels import MODE_CHANNELS, convert_channels, to_uint8
from tfrecord_torch.features.images.jpeg import (
    JPEG_DECODERS,
    check_decoder,
    decode_jpeg,
    decode_jpeg_fast,
    decode_jpeg_planes,
    fast_jpeg,
    simplejpeg_available,
    to_planes,
)
from tfrecord_torch.features.images.limits import (
    MAX_IMAGE_PIXELS,
    Header,
    check_pixels,
    image_info,
    image_size,
    read_header,
)
from tfrecord_torch.features.images.pillow import pillow_frames

__all__ = ["FRAMES", "IMAGE_MODES", "MAX_IMAGE_PIXELS", "decode_checked", "decode_hwc", "decode_image", "decode_pixels", "image_info",
           "image_size", "preload"]

log = logging.getLogger(__name__)
IMAGE_MODES = ("RGB", "L", "RGBA", "unchanged")
FRAMES = ("first", "all")
_ANIMATED = ("gif", "webp")  # formats TF's decode_image(expand_animations=True) gives 4-D
_WARNED = False  # the Pillow fallback after TensorFlow has been logged once


def decode_image(data: bytes, mode: str = "RGB", *, frames: str = "first", decoder: str = "accurate"
                 ) -> torch.Tensor:
    """Decode encoded image bytes as TensorFlow does.

    Args:
        data: the encoded image (PNG, JPEG, GIF, WebP, BMP, TIFF, ...).
        mode: "RGB" (C=3), "L" (C=1), "RGBA" (C=4) or "unchanged" (the stored
            layout; 16-bit PNGs stay 16-bit).
        frames: "first" (the first frame of an animation) or "all" (GIF and
            WebP give [N, C, H, W], like ``decode_image(expand_animations=True)``).
        decoder: a JPEG's IDCT: "accurate" (``dct_method="INTEGER_ACCURATE"``,
            torchvision's pixels) or "fast" (TF's default ``dct_method``, bit
            for bit). Other formats decode the same either way.

    Returns:
        C-contiguous uint8 tensor [C, H, W] (uint16 for a 16-bit PNG with
        mode="unchanged"), or [N, C, H, W] for GIF and WebP with frames="all".

    Raises:
        ValueError: corrupt bytes, an image over the pixel limits, a mode
            the format cannot honour (RGBA from a JPEG), or a ``mode``,
            ``frames`` or ``decoder`` not listed above (naming the argument).
        FastDecoderUnavailable: ``decoder="fast"`` where simplejpeg cannot
            be imported (the message says how to get it).
    """
    return decode_pixels(data, mode, frames=frames, decoder=decoder)


def decode_pixels(data: bytes, mode: str = "RGB", *, frames: str = "first", planes: bool = True,
                  decoder: str = "accurate") -> torch.Tensor:
    """:func:`decode_image`, laid out as asked: ``planes`` gives C-contiguous
    planes; otherwise a single image is the [C, H, W] view of its decoded
    [H, W, C] buffer (channels-last strides), no copy made."""
    # checked here, not by the decoders: libjpeg's path would take any mode but "L" for RGB
    check_choice("mode", mode, IMAGE_MODES)
    check_choice("frames", frames, FRAMES)
    check_decoder(decoder)
    return decode_checked(data, mode, frames, planes, decoder)


def decode_checked(data: bytes, mode: str, frames: str, planes: bool, decoder: str) -> torch.Tensor:
    """:func:`decode_pixels` with the checks an ``Image`` feature ran when it
    was made: here only whether the arguments are still among the choices
    (a feature's attribute set since), not the full checks' messages."""
    if mode not in IMAGE_MODES or frames not in FRAMES or decoder not in JPEG_DECODERS:
        return decode_pixels(data, mode, frames=frames, planes=planes, decoder=decoder)  # raises, naming it
    arrays, animation = _decode_arrays(data, mode, frames == "all", decoder, planes)
    if planes:
        out = [torch.from_numpy(_planes(array)) for array in arrays]
    else:
        out = [torch.from_numpy(_writeable(array)).permute(2, 0, 1) for array in arrays]
    if animation:
        return torch.stack(out)
    return out[0]


def decode_hwc(data: bytes, mode: str = "RGB", *, decoder: str = "accurate") -> np.ndarray:
    """The first frame of :func:`decode_image` as the decoders give it: a
    writeable array [H, W, C]."""
    check_decoder(decoder)
    return _writeable(_decode_arrays(data, mode, False, decoder)[0][0])


def _decode_arrays(data: bytes, mode: str, all_frames: bool, decoder: str, planes: bool = False
                   ) -> tuple[list[np.ndarray], bool]:
    """The frames [H, W, C] of ``data`` in ``mode``, and whether they are an
    animation's (with ``all_frames``; else the first frame alone). With
    ``planes``, an RGB JPEG may come decoded straight to planes, seen as
    [H, W, C] (:func:`_planes` gives them back without a copy)."""
    header = read_header(data)
    fmt = header.format
    animation = all_frames and fmt in _ANIMATED  # other formats give their first frame (page)
    check_pixels(header, header.frames if animation else 1)
    if fmt == "jpeg" and mode == "RGBA":
        raise ValueError("a JPEG has no alpha channel, so mode='RGBA' cannot be honoured (TensorFlow "
                         "refuses channels=4 for JPEG too); use mode='RGB'")
    if planes and fmt == "jpeg" and fast_jpeg(header) and (mode == "RGB" or (mode == "unchanged" and header.channels == 3)):
        decoded = decode_jpeg_planes(data, header, decoder=decoder)
        if decoded is not None:
            return [decoded.transpose(1, 2, 0)], False
    if fmt == "jpeg" and decoder == "fast":
        return [_tf_default(data, header, mode)], False
    if fmt == "jpeg" and fast_jpeg(header):
        array = _libjpeg(data, mode == "L" or (mode == "unchanged" and header.channels == 1))
        if array is not None:
            return [array], False
    if fmt == "gif" and not animation and header.frames > 1:
        data = data[:header.first_frame_end] + b";"  # giflib would decode every frame
    torchvision_reads = fmt in ("jpeg", "gif") or (fmt == "webp" and header.frames == 1)  # not animated WebP
    if torchvision_reads and _torchvision_usable():
        arrays = _torchvision(data, header, mode)
    else:
        arrays = pillow_frames(data, all_frames=animation, gray_jpeg=mode == "L", key_alpha=mode == "RGBA")
    if mode != "unchanged":
        arrays = [to_uint8(convert_channels(array, MODE_CHANNELS[mode])) for array in arrays]
    return arrays, animation


def _libjpeg(data: bytes, gray: bool) -> np.ndarray | None:
    """A gray, YCbCr or RGB JPEG of 8 bits as RGB [H, W, 3] (libjpeg's luma
    [H, W, 1] if ``gray``), with the accurate integer IDCT; None where
    simplejpeg is absent or refuses the data: it makes libjpeg's warnings
    (corrupt data libjpeg papers over) errors, and those JPEGs take the
    other decoders, which decode them as TensorFlow does."""
    if not simplejpeg_available():  # pragma: no cover - a core dependency
        return None
    try:
        return decode_jpeg(data, decoder="accurate", gray=gray)
    except ValueError:
        return None


def _tf_default(data: bytes, header: Header, mode: str) -> np.ndarray:
    """A JPEG in ``mode`` as TF's default ``dct_method`` decodes it: libjpeg's
    luma for "L" (RGB for CMYK, where TF refuses channels=1, then the same
    arithmetic as the other decoders' "L")."""
    gray = mode == "L" or (mode == "unchanged" and header.channels == 1)
    array = decode_jpeg_fast(data, header, gray=gray)
    if mode == "L" and array.shape[2] != 1:
        array = to_uint8(convert_channels(array, MODE_CHANNELS[mode]))
    return array


def _planes(array: np.ndarray) -> np.ndarray:
    """A decoded [H, W, C] array as C-contiguous planes [C, H, W] (writeable)."""
    planes = array.transpose(2, 0, 1)
    if planes.flags.c_contiguous:  # one channel, or a decoder's planes seen as [H, W, C]
        return _writeable(planes)
    if array.shape[2] == 3 and array.dtype == np.uint8:
        return to_planes(array)  # compiled, one pass
    return np.ascontiguousarray(planes)


def _writeable(array: np.ndarray) -> np.ndarray:
    return array if array.flags.writeable else array.copy()  # Pillow's arrays are read-only


def _torchvision(data: bytes, header: Header, mode: str) -> list[np.ndarray]:
    """Frames [H, W, C] from torchvision, libjpeg doing JPEG's own channel conversions."""
    from torchvision.io import ImageReadMode

    read = ImageReadMode.RGB
    if header.format == "jpeg" and (mode == "L" or (mode == "unchanged" and header.channels == 1)) \
            and header.channels != 4:  # libjpeg's luma, as TF's channels=1; TF refuses it for CMYK
        read = ImageReadMode.GRAY
    elif header.format == "webp" and mode in ("RGBA", "unchanged"):
        read = ImageReadMode.RGB_ALPHA if mode == "RGBA" else ImageReadMode.UNCHANGED
    tensor = torchvision_decode("decode_image", data, read)
    if tensor.dim() == 3:
        tensor = tensor[None]
    return [frame.permute(1, 2, 0).numpy() for frame in tensor]


def torchvision_decode(op: str, data: bytes, read: Any) -> torch.Tensor:
    """torchvision's compiled decoder ``op`` ("decode_image", "decode_png") on
    ``data`` in ``read`` mode (an ``ImageReadMode``), EXIF orientation not
    applied: what ``torchvision.io.<op>`` calls, without its Python wrapper,
    which since torchvision 0.29 warns (DeprecationWarning) at every call.
    Silencing that with ``warnings.catch_warnings`` would swap the whole
    process's warning filters and handler from a decode thread while the
    user's threads warn (catch_warnings is not thread-safe): it dropped
    ``on_error="warn"``'s warnings in a test (tests/unit/features/images/
    test_thread_warnings.py)."""
    import torchvision.io  # noqa: F401  (loads the extension that registers torch.ops.image)

    return getattr(torch.ops.image, op)(torch.frombuffer(bytearray(data), dtype=torch.uint8), read.value, False)


def preload() -> None:
    """Import the decoders now, in the main process, so DataLoader workers
    forked from it do not each pay the import at their first image, every
    epoch (torchvision's takes about a second and a half); and tv_tensors,
    which wraps the decoded images."""
    simplejpeg_available()
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
