"""Image headers read before any decoding, and the pixel limits they are checked against.

Every decoder here allocates from the size its header declares, so a few
kilobytes can ask for gigabytes (a GIF of 2,000 frames of 2000x2000 fits in
46 KB). :func:`read_header` reads the format, size, channel layout and frame
count from the bytes alone -- PNG, JPEG, GIF and WebP by walking their
headers and blocks (a JPEG's markers as libjpeg walks them), other formats through Pillow's lazy ``open`` (which reads
only the header) -- and :func:`check_pixels` refuses an image whose decoded
frames would exceed :data:`MAX_IMAGE_PIXELS`, before a pixel buffer exists.
:func:`read_headers` reads a batch's headers, its JPEGs in one call of the
compiled helper (GIL released) where it is built.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_IMAGE_PIXELS", "Header", "PillowLimitError", "check_pixels", "image_format", "image_info", "image_size",
           "pillow_open", "read_header", "read_headers"]

MAX_IMAGE_PIXELS = 1 << 28  # pixels of all frames decoded at once (1 GiB as RGBA)


@dataclass(frozen=True)
class Header:
    """What an image's header declares.

    Attributes:
        format: "png", "jpeg", "gif", "webp" or Pillow's lower-case format name.
        width, height: the canvas size in pixels.
        frames: the number of frames (1 for still images).
        channels: the stored channel count (JPEG components, PNG colour type;
            palette counted as 3, or 4 with transparency), None if unknown.
        bit_depth: bits per sample (16 for 16-bit PNGs).
        first_frame_end: GIF only: the offset just past the first frame's data.
    """

    format: str
    width: int
    height: int
    frames: int = 1
    channels: int | None = None
    bit_depth: int = 8
    first_frame_end: int = 0


def image_format(data: bytes) -> str | None:
    """"png", "jpeg", "gif" or "webp" from the magic bytes, else None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:4] == b"GIF8":
        return "gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def read_header(data: bytes) -> Header:
    """The header of encoded image bytes; ValueError if it is missing or corrupt.

    A JPEG's markers are walked as libjpeg's ``jpeg_read_header`` walks them, up to the first
    scan, so its size is the size libjpeg decodes. Where libjpeg itself would stop before the
    scan (no frame header before it, a second frame header or SOI, an EOI, a marker it does not
    read, a table or frame header of an impossible length, the data ending first) the error says
    which, at which byte of the image, in a message that starts "JPEG header".
    """
    fmt = image_format(data)
    if fmt == "png":
        return _png(data)
    if fmt == "jpeg":
        return _jpeg(data)
    if fmt == "gif":
        return _gif(data)
    if fmt == "webp":
        return _webp(data)
    return _pillow(data)


def read_headers(images: Iterable[bytes]) -> list[Header | Exception]:
    """Each image's :func:`read_header`, or the error it raises.

    JPEGs given as bytes are scanned by the compiled helper, all in one call
    with the GIL released (the marker walk of :func:`read_header`, in C: the
    same headers and the same errors); other formats, and every image when
    the helper is not built, go through :func:`read_header`.

    Raises:
        TypeError: ``images`` is one image (bytes) or not iterable.
    """
    if isinstance(images, (bytes, bytearray, memoryview, str)):
        raise TypeError(f"images must be a sequence of images, got {type(images).__name__} (one image: "
                        f"read_header(data), or read_headers([data]))")
    images = list(images)  # a generator too: both paths read each image once
    scanned = _HELPER.jpeg_headers(images) if _HELPER is not None else [None] * len(images)
    known: dict[tuple[int, int, int, int], Header] = {}  # a batch's images mostly share one header
    headers: list[Header | Exception] = []
    for data, found in zip(images, scanned):
        if found is None:
            try:
                headers.append(read_header(data))
            except Exception as e:  # noqa: BLE001 - the image's error, returned in its place
                headers.append(e)
        elif len(found) == 3:  # (reason, offset, marker): libjpeg would stop there too
            headers.append(ValueError(_jpeg_problem(*found)))
        else:
            header = known.get(found)
            if header is None:
                width, height, channels, depth = found
                header = known[found] = Header("jpeg", width, height, 1, channels, depth)
            headers.append(header)
    return headers


def check_pixels(header: Header, frames: int = 1) -> None:
    """Refuse an image when ``frames`` of its frames would exceed MAX_IMAGE_PIXELS.

    Raises:
        ValueError: the size, naming the frame count and the limit.
    """
    if header.width <= 0 or header.height <= 0:
        raise ValueError(f"{header.format} header declares an empty image ({header.width}x{header.height})")
    pixels = header.width * header.height * frames
    if pixels > MAX_IMAGE_PIXELS:
        many = f"{frames} frames of " if frames > 1 else ""
        raise ValueError(f"{header.format} image of {many}{header.width}x{header.height} pixels exceeds "
                         f"the limit of {MAX_IMAGE_PIXELS} pixels (MAX_IMAGE_PIXELS)")


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG or JPEG header, or None for other formats."""
    if image_format(data) not in ("png", "jpeg"):
        return None
    header = read_header(data)
    return header.width, header.height


def image_info(data: bytes) -> tuple[int, int, int] | None:
    """(width, height, channels) from a PNG or JPEG header, or None for other
    formats (palette PNGs count 3 channels, or 4 with transparency)."""
    if image_format(data) not in ("png", "jpeg"):
        return None
    header = read_header(data)
    return header.width, header.height, header.channels or 3


def _png(data: bytes) -> Header:
    if len(data) < 29 or data[12:16] != b"IHDR":
        raise ValueError("PNG header is truncated or has no IHDR chunk")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    depth, color = data[24], data[25]
    channels = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(color)
    if channels is None or depth not in (1, 2, 4, 8, 16):
        raise ValueError(f"PNG header has an invalid colour type {color} or bit depth {depth}")
    if color == 3 and b"tRNS" in data[:data.find(b"IDAT")]:
        channels = 4
    return Header("png", width, height, 1, channels, depth)


def _jpeg(data: bytes) -> Header:
    # the compiled walk (the same answers) where built: the Python one holds the GIL for tens of us,
    # which a decode thread's neighbours and the training loop wait for
    found = _HELPER.jpeg_headers((data,))[0] if _HELPER is not None and type(data) is bytes else None
    if found is None:
        found = _jpeg_walk(data if isinstance(data, (bytes, bytearray)) else bytes(data))
    if len(found) == 3:
        raise ValueError(_jpeg_problem(*found))
    width, height, channels, depth = found
    return Header("jpeg", width, height, 1, channels, depth)


# How libjpeg's read_markers (jdmarker.c) treats each marker before the first scan. Any marker not
# listed is one it refuses ("Unsupported marker type"), JPG (C8) among them.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOF0-SOF15: the frame header
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])  # TEM, RST0-RST7: no length follows
_TABLES = frozenset([0xC4, 0xCC, 0xDB, 0xDD])  # DHT, DAC, DQT, DRI: a length below 2 is refused
_SKIPPED = frozenset([*range(0xE0, 0xF0), 0xFE, 0xDC])  # APPn, COM, DNL: a length below 2 skips nothing more
_SOI, _EOI, _SOS = 0xD8, 0xD9, 0xDA
# why a walk stops without a frame; _jpegcrop.c's jpeg_frame uses the same numbers
_TRUNCATED, _SCAN_FIRST, _SECOND, _EARLY_END, _UNKNOWN, _BAD_LENGTH = range(6)


def _jpeg_walk(data: bytes) -> tuple[int, ...]:
    """The frame header libjpeg's ``jpeg_read_header`` would read, walking the markers as it does up to
    the first scan: (width, height, components, precision), or (reason, byte offset, marker) where
    libjpeg would stop with an error before it reaches a scan (or where its frame is malformed).

    As libjpeg's ``next_marker``: bytes other than FF between segments are skipped (libjpeg warns of
    "extraneous bytes"), FF FF is fill and FF 00 is skipped too. TEM and RST0-7 carry no length;
    every other marker is skipped by its 16-bit length (APPn, COM and DNL with a length below 2 by
    the length field alone, as libjpeg skips them). A second frame header or SOI, an EOI, or a
    marker libjpeg does not know, before the scan, is an error in libjpeg too. This file's twin in C
    is ``_jpegcrop.c: jpeg_frame``, tested to give the same answers.
    """
    n, pos, frame = len(data), 2, None  # after SOI
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0:
            return (_TRUNCATED, n, 0)
        while pos < n and data[pos] == 0xFF:
            pos += 1
        if pos >= n:
            return (_TRUNCATED, n, 0)
        marker, at = data[pos], pos - 1
        pos += 1
        if marker == 0 or marker in _STANDALONE:  # FF 00: a stuffed zero, skipped as libjpeg skips it
            continue
        if marker == _SOS:
            return frame if frame is not None else (_SCAN_FIRST, at, marker)
        if marker == _SOI or (marker in _SOF and frame is not None):
            return (_SECOND, at, marker)
        if marker == _EOI:
            return (_EARLY_END, at, marker)
        if marker not in _SOF and marker not in _TABLES and marker not in _SKIPPED:
            return (_UNKNOWN, at, marker)
        if pos + 2 > n:
            return (_TRUNCATED, n, 0)
        length = data[pos] << 8 | data[pos + 1]
        if marker in _SOF:
            if pos + 8 > n:
                return (_TRUNCATED, n, 0)
            if length != 8 + 3 * data[pos + 7]:  # libjpeg: "Bogus marker length"
                return (_BAD_LENGTH, at, marker)
            frame = (data[pos + 5] << 8 | data[pos + 6], data[pos + 3] << 8 | data[pos + 4], data[pos + 7],
                     data[pos + 2])
        elif length < 2 and marker in _TABLES:
            return (_BAD_LENGTH, at, marker)
        pos += max(length, 2)


def _jpeg_problem(reason: int, at: int, marker: int) -> str:
    """The message for a walk that stopped without a frame (see :func:`_jpeg_walk`)."""
    name = {_SOI: "start-of-image (SOI)", _SOS: "scan (SOS)", _EOI: "end-of-image (EOI)"}.get(
        marker, "frame header (SOF)" if marker in _SOF else f"0xFF{marker:02X}")
    return {
        _TRUNCATED: f"JPEG header ends at byte {at}, before its first scan (truncated)",
        _SCAN_FIRST: f"JPEG header is corrupt: the scan (SOS) at byte {at} comes before any frame header (SOF)",
        _SECOND: f"JPEG header is corrupt: a second {name} at byte {at}",
        _EARLY_END: f"JPEG header is corrupt: end-of-image (EOI) at byte {at}, before any scan",
        _UNKNOWN: f"JPEG header is corrupt: marker {name} at byte {at} is not one libjpeg reads",
        _BAD_LENGTH: f"JPEG header is corrupt: marker {name} at byte {at} has an impossible length",
    }[reason]


def _skip_sub_blocks(data: bytes, pos: int) -> int:
    n = len(data)
    while pos < n:
        size = data[pos]
        pos += 1 + size
        if size == 0:
            return pos
    raise ValueError("GIF data is truncated inside a block")


def _gif(data: bytes) -> Header:
    """Walk the GIF's blocks (no LZW decoding) to count its frames."""
    if len(data) < 13:
        raise ValueError("GIF header is truncated")
    width, height = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    pos = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)
    frames, first_end, n = 0, 0, len(data)
    while pos < n:
        block = data[pos]
        if block == 0x3B:  # trailer
            break
        if block == 0x21:  # extension: label, then sub-blocks
            pos = _skip_sub_blocks(data, pos + 2)
        elif block == 0x2C:  # image descriptor
            if pos + 10 > n:
                raise ValueError("GIF image descriptor is truncated")
            fw, fh = int.from_bytes(data[pos + 5:pos + 7], "little"), int.from_bytes(data[pos + 7:pos + 9], "little")
            check_pixels(Header("gif", fw or 1, fh or 1))  # a frame larger than the limit on its own
            packed = data[pos + 9]
            pos += 10 + (3 << ((packed & 7) + 1) if packed & 0x80 else 0)
            pos = _skip_sub_blocks(data, pos + 1)  # the LZW minimum code size, then the data
            frames += 1
            if frames == 1:
                first_end = pos
        else:
            break  # garbage after the last frame: decoders stop there too
    if frames == 0:
        raise ValueError("GIF has no image")
    return Header("gif", width, height, frames, 3, 8, first_end)


def _webp(data: bytes) -> Header:
    kind = data[12:16]
    if kind == b"VP8 " and len(data) >= 30:
        width, height = int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
        return Header("webp", width, height, 1, 3)
    if kind == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        alpha = bool(bits >> 28 & 1)
        return Header("webp", (bits & 0x3FFF) + 1, (bits >> 14 & 0x3FFF) + 1, 1, 4 if alpha else 3)
    if kind == b"VP8X" and len(data) >= 30:
        flags = data[20]
        width, height = int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
        frames, pos = 0, 30
        while pos + 8 <= len(data):  # count the animation's frames (ANMF chunks)
            size = int.from_bytes(data[pos + 4:pos + 8], "little")
            frames += data[pos:pos + 4] == b"ANMF"
            pos += 8 + size + (size & 1)
        return Header("webp", width, height, max(frames, 1), 4 if flags & 0x10 else 3)
    raise ValueError("WebP header is truncated or of an unknown kind")


def _pillow(data: bytes) -> Header:
    from PIL import Image as PILImage

    try:
        with pillow_open(data) as im:  # reads the header only
            width, height = im.size
            fmt = (im.format or "unknown").lower()
            frames = int(getattr(im, "n_frames", 1) or 1)
    except PillowLimitError:
        raise
    except PILImage.UnidentifiedImageError:  # its message names only the BytesIO object made here
        raise ValueError(f"not an image format this package reads (neither it nor Pillow knows bytes that "
                         f"begin {bytes(data[:8])!r})") from None
    except Exception as e:  # Pillow raises many types for unreadable bytes
        raise ValueError(f"not an image format this package reads ({type(e).__name__}: {e})") from None
    return Header(fmt, width, height, frames)


class PillowLimitError(ValueError):
    """An image over Pillow's own pixel limit (``PIL.Image.MAX_IMAGE_PIXELS``), which Pillow decodes."""


def pillow_open(data: bytes) -> Any:
    """``PIL.Image.open`` on ``data``; Pillow's decompression-bomb refusal as a
    :class:`PillowLimitError` (a ValueError) saying which limit.

    Pillow keeps its own limit (``PIL.Image.MAX_IMAGE_PIXELS``, about 89
    million pixels: a DecompressionBombWarning above it, a refusal above
    twice it) beside this package's :data:`MAX_IMAGE_PIXELS`: its warning is
    not silenced, as ``warnings.catch_warnings`` would swap the process's
    warning filters from a decode thread while the user's threads warn (it
    is not thread-safe; see ``decode.torchvision_decode``).
    """
    from PIL import Image as PILImage

    try:
        return PILImage.open(io.BytesIO(data))
    except PILImage.DecompressionBombError as e:
        raise PillowLimitError(f"{e} Pillow decodes this image, and this is Pillow's limit, "
                         f"PIL.Image.MAX_IMAGE_PIXELS: raise it to decode larger images") from None


def _helper() -> Any:
    """The compiled helper (JPEG headers of a batch in one call), or None when it is not built."""
    try:  # by name: grimp would read `from <package> import _jpegcrop` as an import of the package
        module = importlib.import_module("tfrecord_torch.features.images._jpegcrop")
    except ImportError:
        return None
    return module if hasattr(module, "jpeg_headers") else None  # a build older than the scan


_HELPER: Any = _helper()
