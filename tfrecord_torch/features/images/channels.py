"""Channel and depth conversions with TensorFlow's arithmetic.

TensorFlow's PNG decoder asks libpng for the channel count it was given:
gray to RGB repeats the gray value, an added alpha is opaque, a dropped alpha
is dropped (not composited), RGB to gray is libpng's ``rgb_to_gray`` with
weights 0.299 and 0.587 in 1/32768ths (truncated for 8 bits, rounded for
16), and a 16-bit image read as 8 bits keeps the high byte of each sample
(``png_set_strip_16``, not rounding). Arrays here are [H, W, C].
"""

from __future__ import annotations

import numpy as np

__all__ = ["MODE_CHANNELS", "convert_channels", "to_uint8"]

MODE_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}
# libpng's png_set_rgb_to_gray(png_ptr, 1, 0.299, 0.587): coefficients in 1/32768ths,
# the fractions truncated, blue taking the rest.
_RED, _GREEN = 29900 * 32768 // 100000, 58700 * 32768 // 100000
_BLUE = 32768 - _RED - _GREEN


def to_uint8(array: np.ndarray) -> np.ndarray:
    """8-bit samples: 16-bit ones keep their high byte, as TensorFlow's decoders do."""
    if array.dtype == np.uint8:
        return array
    return (array >> 8).astype(np.uint8)


def gray(rgb: np.ndarray) -> np.ndarray:
    """[H, W, 3] to [H, W, 1] with libpng's weights (what decode_png(channels=1) gives)."""
    r, g, b = (rgb[:, :, i].astype(np.uint32) for i in range(3))
    total = _RED * r + _GREEN * g + _BLUE * b
    if rgb.dtype == np.uint16:
        total += 16384  # libpng rounds 16-bit gray values and truncates 8-bit ones
    return (total >> 15).astype(rgb.dtype)[:, :, None]


def convert_channels(array: np.ndarray, channels: int) -> np.ndarray:
    """[H, W, C] with C in 1..4 (L, LA, RGB, RGBA) to ``channels`` channels."""
    have = array.shape[2]
    if have == channels:
        return array
    color = array[:, :, :3] if have >= 3 else np.repeat(array[:, :, :1], 3, axis=2)
    if channels == 1:
        return array[:, :, :1] if have <= 2 else gray(color)
    if channels == 3:
        return np.ascontiguousarray(color)
    alpha = array[:, :, have - 1:] if have in (2, 4) else \
        np.full(array.shape[:2] + (1,), np.iinfo(array.dtype).max, array.dtype)
    if channels == 4:
        return np.concatenate([color, alpha], axis=2)
    base = array[:, :, :1] if have <= 2 else gray(color)
    return np.concatenate([base, alpha], axis=2)  # channels == 2
