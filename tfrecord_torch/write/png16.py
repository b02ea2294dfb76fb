"""A PNG encoder for 16-bit samples, which Pillow cannot write for colour images.

Rows use PNG's "Sub" filter (each byte minus the byte one pixel to its left,
computed for all rows at once with numpy), then zlib: a valid PNG that
TensorFlow's ``decode_png(dtype=tf.uint16)`` and libpng read back exactly.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

__all__ = ["encode_png16"]

_COLOR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type (gray, gray+alpha, RGB, RGBA)


def encode_png16(pixels: np.ndarray, level: int = 6) -> bytes:
    """PNG bytes of a uint16 array [H, W, C] with C in 1..4."""
    if pixels.dtype != np.uint16 or pixels.ndim != 3 or pixels.shape[2] not in _COLOR_TYPES:
        raise TypeError(f"expected a uint16 array [H, W, C] with C in 1..4, got {pixels.dtype} {pixels.shape}")
    h, w, c = pixels.shape
    rows = pixels.astype(">u2").view(np.uint8).reshape(h, w * c * 2)
    bpp = c * 2
    filtered = rows.copy()
    filtered[:, bpp:] -= rows[:, :-bpp]  # Sub filter, modulo 256 by uint8 arithmetic
    data = np.concatenate([np.ones((h, 1), np.uint8), filtered], axis=1).tobytes()
    header = struct.pack(">IIBBBBB", w, h, 16, _COLOR_TYPES[c], 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(data, level)) + \
        _chunk(b"IEND", b"")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
