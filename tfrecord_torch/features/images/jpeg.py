"""JPEG decoding for the batch fast path: libjpeg-turbo through simplejpeg,
straight into a caller's buffer, with the GIL released.

``decoder="fast"`` (the default of the fast path) is libjpeg's fast integer
IDCT with fancy upsampling: the pixels ``tf.io.decode_jpeg(channels=3)``
gives with its default ``dct_method=""``, bit for bit. ``decoder="accurate"``
is the accurate integer IDCT: ``dct_method="INTEGER_ACCURATE"``, and what
torchvision's ``decode_jpeg`` and the per-sample :class:`Image` give.

:func:`decode_jpeg_window` decodes only a crop window where the package's
compiled helper (``_jpegcrop``, built on the system's libjpeg-turbo by the
set-up command) is present, and otherwise decodes the whole image and
slices it: the same pixels either way. :func:`crop_decoding_available` tells
which.

Only what libjpeg converts to RGB itself takes this path (gray, YCbCr, RGB);
CMYK/YCCK JPEGs and every other format go through :func:`.decode.decode_image`.
:func:`decode_jpeg_fast` is the exception: TF's default pixels exist for
every JPEG TF decodes, CMYK and corrupt ones included, and only libjpeg's
fast IDCT gives them, so that decode has no fallback to another decoder.
"""

from __future__ import annotations

import functools
import importlib
import operator
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tfrecord_torch._args import check_choice
from tfrecord_torch.features.images.limits import Header, read_header

__all__ = ["JPEG_DECODERS", "FastDecoderUnavailable", "JpegClaims", "check_decoder", "crop_decoding_available", "decode_jpeg",
           "decode_jpeg_fast", "decode_jpeg_planes", "decode_jpeg_window", "decode_jpegs_into", "fast_jpeg", "planes_into",
           "simplejpeg_available", "to_planes"]

JPEG_DECODERS = ("fast", "accurate")


class FastDecoderUnavailable(RuntimeError):
    """``decoder="fast"`` was asked for where libjpeg's fast IDCT cannot be
    had: no other decoder gives TF's default pixels, so none stands in."""


def check_decoder(decoder: str, *, name: str = "decoder") -> str:
    """``decoder`` if it is one of :data:`JPEG_DECODERS` and can run here.

    Raises:
        ValueError: another value (naming ``name`` and the allowed values).
        FastDecoderUnavailable: "fast" without simplejpeg, which alone
            brings libjpeg-turbo's fast IDCT (torchvision and Pillow have
            only the accurate one).
    """
    check_choice(name, decoder, JPEG_DECODERS)
    if decoder == "fast" and not simplejpeg_available():
        raise FastDecoderUnavailable(
            f"{name}='fast' (TF's default JPEG pixels) needs libjpeg-turbo's fast IDCT, which this package gets "
            f"from simplejpeg, and simplejpeg cannot be imported: `pip install simplejpeg` (a dependency of "
            f"tfrecord_torch), or use {name}='accurate' (dct_method='INTEGER_ACCURATE', torchvision's pixels)")
    return decoder


@functools.cache
def simplejpeg_available() -> bool:
    """True when simplejpeg can be imported (a core dependency; checked anyway),
    importing it the first time."""
    try:
        import simplejpeg  # noqa: F401
    except ImportError:  # pragma: no cover - installed with the package
        return False
    return True


def fast_jpeg(header: Header) -> bool:
    """Whether this header's image can take the simplejpeg path to RGB."""
    return header.format == "jpeg" and header.channels in (1, 3) and header.bit_depth == 8


def decode_jpeg(data: bytes, *, decoder: str = "fast", out: np.ndarray | None = None,
                min_size: tuple[int, int] = (0, 0), gray: bool = False) -> np.ndarray:
    """Decode a JPEG to RGB uint8 [H, W, 3] (libjpeg's luma [H, W, 1] if ``gray``).

    Args:
        data: the JPEG bytes (check :func:`fast_jpeg` on its header first).
        decoder: "fast" (TF's default IDCT) or "accurate" (INTEGER_ACCURATE).
        out: a C-contiguous uint8 [H, W, 3] array of the image's size to decode
            into (no copy); None allocates.
        min_size: (height, width) the output must reach at least: libjpeg's DCT
            scaling decodes at 1/2, 1/4 or 1/8 size when that still fits.
        gray: libjpeg's luma [H, W, 1] (as ``channels=1``) instead of RGB.

    Returns:
        ``out`` (or a new array) holding the pixels.

    Raises:
        ValueError: corrupt or truncated data (libjpeg's message), or a
            ``decoder`` not listed above.
    """
    import simplejpeg

    check_choice("decoder", decoder, JPEG_DECODERS)
    colorspace = "gray" if gray else "rgb"
    if min_size != (0, 0):
        return simplejpeg.decode_jpeg(data, colorspace, fastdct=decoder == "fast", fastupsample=False,
                                      min_height=min_size[0], min_width=min_size[1], min_factor=1.0)
    return simplejpeg.decode_jpeg(data, colorspace, fastdct=decoder == "fast", fastupsample=False, buffer=out)


def decode_jpeg_fast(data: bytes, header: Header, *, gray: bool = False) -> np.ndarray:
    """Any 8-bit JPEG as ``tf.io.decode_jpeg`` decodes it with its default
    ``dct_method`` (libjpeg's fast integer IDCT, fancy upsampling).

    Gray, YCbCr and RGB JPEGs give RGB [H, W, 3] (libjpeg's luma [H, W, 1]
    if ``gray``, as ``channels=1``). CMYK/YCCK JPEGs give RGB [H, W, 3] from
    libjpeg's CMYK as TF computes it (each of C, M, Y times K over 255,
    rounded down: Adobe's inverted CMYK); ``gray`` does not apply to them
    (TF refuses ``channels=1`` there). Corrupt data that libjpeg papers
    over with a warning is decoded as TF decodes it; a file cut short (no
    end-of-image marker after its last scan) is refused, as TF refuses it.

    Raises:
        ValueError: data libjpeg cannot decode (its message).
        FastDecoderUnavailable: simplejpeg cannot be imported.
    """
    check_decoder("fast")
    import simplejpeg

    cmyk = header.channels == 4
    colorspace = "CMYK" if cmyk else "gray" if gray else "rgb"
    try:
        image = simplejpeg.decode_jpeg(data, colorspace, fastdct=True, fastupsample=False)
    except ValueError:
        if not _scans_end(data):
            raise ValueError("Premature end of JPEG file (no end-of-image marker after its last scan): "
                             "TensorFlow refuses it too") from None
        # a warning only (libjpeg fills what it cannot decode), which TF accepts; errors still raise
        image = simplejpeg.decode_jpeg(data, colorspace, fastdct=True, fastupsample=False, strict=False)
    if not cmyk:
        return image
    rgb = image[:, :, :3].astype(np.uint16)
    rgb *= image[:, :, 3:]
    rgb //= 255
    return rgb.astype(np.uint8)


def _scans_end(data: bytes) -> bool:
    """Whether an end-of-image marker follows the last scan header: entropy
    data never holds FF D9 or FF DA (an FF there is followed by 00 or a
    restart marker), so without one libjpeg runs out of data, where TF's
    decoder fails (``_jpegcrop.c``'s ``has_eoi`` reasons the same way)."""
    return data.rfind(b"\xff\xd9") > data.rfind(b"\xff\xda") >= 0


def _crop_helper():  # the compiled helper, or None where it was not built
    try:
        # by name: grimp would read `from <package> import _jpegcrop` as an import of the package
        # (it sees no .so), a cycle through the package's face
        return importlib.import_module("tfrecord_torch.features.images._jpegcrop")
    except ImportError:
        return None


_CROP = _crop_helper()
_PLANES = getattr(_CROP, "to_planes", None)  # None too where the helper was built from older sources
_DECODE_PLANES = getattr(_CROP, "decode_planes", None)
_MAX_SIDE = 65500  # libjpeg's JPEG_MAX_DIMENSION: no JPEG is taller or wider


def crop_decoding_available() -> bool:
    """True when JPEG windows are decoded alone (the compiled helper was built:
    it needs libjpeg's headers, Debian's ``libjpeg-dev``, at install time)."""
    return _CROP is not None


def decode_jpeg_window(data: bytes, box: tuple[int, int, int, int], *, decoder: str = "fast") -> np.ndarray:
    """Decode the window ``box`` = (top, left, height, width) of a JPEG to RGB uint8.

    Rows above the window are skipped, columns beside it and rows below it
    are never decoded (libjpeg-turbo's ``jpeg_skip_scanlines`` and
    ``jpeg_crop_scanline``, as ``tf.image.decode_and_crop_jpeg``). The pixels
    equal :func:`decode_jpeg` of the whole image, sliced.

    Returns:
        [height, width, 3] (a view of the full decode where the helper is absent).

    Raises:
        ValueError: corrupt or truncated data, a window outside the image, or
            a ``decoder`` not listed above.
        TypeError: ``data`` not bytes-like, or ``box`` not four ints.
    """
    check_choice("decoder", decoder, JPEG_DECODERS)
    data = _as_bytes("data", data)
    top, left, height, width = box = _window(box)
    if _CROP is None:
        image = decode_jpeg(data, decoder=decoder)
        if top + height > image.shape[0] or left + width > image.shape[1]:
            raise ValueError(f"crop window {box} is outside the {image.shape[0]}x{image.shape[1]} image")
        return image[top:top + height, left:left + width]
    out = np.empty((height, width, 3), np.uint8)  # a size some JPEG can have (_window checked)
    _CROP.decode_crop(data, out, top, left, height, width, decoder == "fast")
    return out


def decode_jpegs_into(images: list[bytes], out: np.ndarray, *, decoder: str = "fast") -> list[str | None]:
    """Decode JPEGs of one size into consecutive slots of ``out``.

    With the compiled helper, the whole list is decoded in one call that
    holds no GIL from the first image to the last (a thread decoding a batch
    never waits for the GIL between images); without it, image by image
    with simplejpeg. Same pixels either way.

    Args:
        images: JPEGs, each exactly ``out.shape[1:3]`` in size (check with
            :func:`fast_jpeg` on their headers first).
        out: C-contiguous uint8 [len(images), H, W, 3].
        decoder: "fast" or "accurate", as :func:`decode_jpeg`.

    Returns:
        Per image: None, or why it could not be decoded (its slot zero-filled).

    Raises:
        ValueError: ``out`` not as described, or a ``decoder`` not listed above.
        TypeError: an image that is not bytes-like.
    """
    images = list(images)
    claims = JpegClaims(images, range(len(images)), decoder=decoder)
    _check_out(out, len(images))
    failures = dict(claims.decode(out))
    return [failures.get(i) for i in range(len(images))]


class JpegClaims:
    """One batch's whole JPEGs, all of one size, shared out among the threads
    that decode it.

    Each thread calling :meth:`decode` takes the next image nobody has taken
    until none is left: the threads finish the batch together, however the
    images' costs fall (fixed shares leave one thread idle while another ends
    its share). The compiled helper takes from an atomic counter without the
    GIL, so a thread decodes all it takes in one call; without it, image by
    image with simplejpeg. The pixels of :func:`decode_jpeg` either way.

    Args:
        images: the JPEGs (bytes-like), each exactly the size of ``out``'s
            slots (check with :func:`fast_jpeg` on their headers first).
        slots: the slot of ``out`` each image goes to (distinct).
        decoder: "fast" or "accurate", as :func:`decode_jpeg`.

    Raises:
        ValueError: ``slots`` not one distinct slot number (>= 0) per
            image, or a ``decoder`` not listed above.
        TypeError: an image that is not bytes-like.
    """

    def __init__(self, images: Iterable[bytes], slots: Iterable[int], *, decoder: str = "fast") -> None:
        check_choice("decoder", decoder, JPEG_DECODERS)
        images = list(images)
        if {type(data) for data in images} - {bytes}:  # one check for the batch: no Python call per image
            images = [_as_bytes(f"images[{i}]", data) for i, data in enumerate(images)]
        self.images, self.decoder = images, decoder
        self.slots = np.array(list(slots), dtype=np.int64)
        if self.slots.shape != (len(images),) or (len(images) and self.slots.min() < 0):
            raise ValueError(f"slots must be one slot number (>= 0) per image: {len(images)} images, "
                             f"slots {self.slots.tolist()}")
        if len(np.unique(self.slots)) != len(images):  # two threads would write one slot at once
            raise ValueError(f"slots must be distinct, one image a slot: {self.slots.tolist()}")
        self._end = int(self.slots.max()) + 1 if len(images) else 0  # out needs this many slots
        self._next = np.zeros(1, np.int64)  # the next image to take
        self._lock = threading.Lock()  # takes without the compiled helper

    def decode(self, out: np.ndarray) -> list[tuple[int, str]]:
        """Decode images taken from the batch until none is left, each into its
        slot of ``out`` (a writeable C-contiguous uint8 [N, H, W, 3]); the
        position and error of each that failed here (its slot zero-filled)."""
        _check_out(out, self._end, exact=False)
        height, width = out.shape[1], out.shape[2]
        if _CROP is not None:
            return _CROP.decode_claimed(self.images, out, self.slots, self._next, height, width,
                                        self.decoder == "fast")
        failures: list[tuple[int, str]] = []
        while (i := self._take()) is not None:
            slot = out[self.slots[i]]
            try:
                header = read_header(self.images[i])
                size = (header.height, header.width)
                if size != (height, width):  # same byte count, other shape: would decode scrambled
                    raise ValueError(f"image is {size[0]}x{size[1]}, expected {height}x{width}")
                decode_jpeg(self.images[i], decoder=self.decoder, out=slot)
            except ValueError as e:
                slot[...] = 0
                failures.append((i, str(e)))
        return failures

    def _take(self) -> int | None:
        with self._lock:
            i = int(self._next[0])
            self._next[0] = i + 1
        return i if i < len(self.images) else None


def decode_jpeg_planes(data: bytes, header: Header, *, decoder: str) -> np.ndarray | None:
    """An RGB or gray 8-bit JPEG (:func:`fast_jpeg`) decoded to RGB planes
    [3, H, W], C-contiguous: the pixels of :func:`decode_jpeg` then
    :func:`to_planes`, without the interleaved image between them (each row
    goes to the planes from a row buffer still in cache, so a large image
    costs one allocation, not two). None where the compiled helper is absent
    or libjpeg warns of corrupt data (the caller's decoders then decide, as
    for simplejpeg's refusals).
    """
    if _DECODE_PLANES is None:
        return None
    shape = (3, header.height, header.width)
    take = getattr(_INTO, "take", None)
    out = None
    if take is not None:
        _INTO.take = None  # one image's planes
        out = take(shape)
        if out is not None and not (isinstance(out, np.ndarray) and out.shape == shape and out.dtype == np.uint8
                                    and out.flags.c_contiguous and out.flags.writeable):
            raise ValueError(f"planes_into: the memory given for a JPEG's planes must be a writeable, C-contiguous "
                             f"uint8 array of shape {shape}, got {_described(out)}")
    if out is None:
        out = np.empty(shape, np.uint8)
    try:
        _DECODE_PLANES(data, out, header.height, header.width, decoder == "fast")
    except ValueError:
        return None
    return out


_INTO = threading.local()


def planes_into(take: Callable[[tuple[int, int, int]], np.ndarray | None] | None) -> None:
    """On this thread, the next JPEG :func:`decode_jpeg_planes` decodes goes
    into ``take(shape)``: a C-contiguous uint8 array of ``shape`` [3, H, W]
    no one else writes to, or None for memory of its own (``take`` None: no
    destination). Asked once: the image after it gets memory of its own. The
    per-sample path's decode threads write a record's image straight into its
    batch this way (:mod:`~tfrecord_torch.data.stackahead`)."""
    _INTO.take = take


def to_planes(image: np.ndarray, *, flip: bool = False) -> np.ndarray:
    """A decoded RGB uint8 [H, W, 3] image as planes, [3, H, W] C-contiguous
    (what torchvision's decoders give), each row mirrored if ``flip``.

    With the compiled helper, one pass with the GIL released, twice as fast
    as torch's copy of the permuted view; without it, NumPy's copy. The
    same values either way.

    Raises:
        ValueError: ``image`` is not a uint8 array [H, W, 3].
    """
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be a uint8 array [H, W, 3], got {_described(image)}")
    height, width = image.shape[0], image.shape[1]
    if _PLANES is None:
        return np.ascontiguousarray((image[:, ::-1] if flip else image).transpose(2, 0, 1))
    out = np.empty((3, height, width), np.uint8)
    _PLANES(np.ascontiguousarray(image), out, height, width, flip)
    return out


# -- arguments: checked here, before the compiled helper or the fallback is chosen, so both paths
# take and refuse the same values with the same errors

def _as_bytes(name: str, data: Any) -> bytes:
    """``data`` as bytes (a bytearray or memoryview copied): what both paths decode."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{name} must be bytes (or a bytearray or memoryview), got {type(data).__name__}")


def _window(box: Iterable[Any]) -> tuple[int, int, int, int]:
    """``box`` as four ints (top, left, height, width); refused where no JPEG could hold it."""
    try:
        values = tuple(box)
    except TypeError:
        values = ()
    if len(values) != 4 or any(isinstance(v, bool) or not hasattr(type(v), "__index__") for v in values):
        raise TypeError(f"box must be four ints (top, left, height, width), got {box!r}")
    top, left, height, width = (operator.index(v) for v in values)
    if min(top, left) < 0 or min(height, width) < 1 or max(top + height, left + width) > _MAX_SIDE:
        raise ValueError(f"crop window {(top, left, height, width)} is outside any JPEG (offsets from 0, sides "
                         f"from 1, at most {_MAX_SIDE} pixels to a side)")
    return top, left, height, width


def _check_out(out: Any, count: int, *, exact: bool = True) -> None:
    """Refuse an ``out`` that is not a writeable C-contiguous uint8 array [count, H, W, 3] of a JPEG's size
    (not ``exact``: at least ``count`` slots)."""
    slots = isinstance(out, np.ndarray) and out.ndim == 4 and (out.shape[0] == count if exact else out.shape[0] >= count)
    if not (slots and out.dtype == np.uint8 and out.shape[3] == 3 and out.flags.c_contiguous and out.flags.writeable
            and 0 < out.shape[1] <= _MAX_SIDE and 0 < out.shape[2] <= _MAX_SIDE):
        many = count if exact else f">={count}"
        raise ValueError(f"out must be a writeable C-contiguous uint8 array [{many}, H, W, 3] (one slot per "
                         f"image, H and W 1 to {_MAX_SIDE}), got {_described(out)}")


def _described(value: Any) -> str:
    if isinstance(value, np.ndarray):
        layout = "" if value.flags.c_contiguous else ", not C-contiguous"
        layout += "" if value.flags.writeable else ", read-only"
        return f"{value.dtype} {list(value.shape)}{layout}"
    return type(value).__name__
