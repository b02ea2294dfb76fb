"""Decoding with Pillow to arrays [H, W, C] laid out as TensorFlow's "unchanged".

PNG always decodes here (torchvision's PNG decoder crashes the process on a
bad zlib checksum), and every format when torchvision cannot be imported.
Pillow reads 16-bit gray PNGs exactly but keeps only the high byte of 16-bit
RGB, RGBA and gray+alpha ones; those are decoded twice through Pillow's own
PNG decoder with raw modes that pick the high and the low bytes (the
unfiltering, which depends only on the bytes per pixel, is the same both
times), so the 16-bit values come out exact.
"""

from __future__ import annotations

import numpy as np

from tfrecord_torch.features.images.limits import pillow_open

__all__ = ["pillow_frames"]

_16BIT = {"RGB;16B": ("RGB", "RGB;16L"), "RGBA;16B": ("RGBA", "RGBA;16L")}


def pillow_frames(data: bytes, *, all_frames: bool = False, gray_jpeg: bool = False,
                  key_alpha: bool = False) -> list[np.ndarray]:
    """The first frame (or every frame) of an image as arrays [H, W, C]: uint8,
    or uint16 for 16-bit PNGs. Palettes are expanded to RGB (RGBA with a
    transparent colour), CMYK to RGB; ``gray_jpeg`` asks libjpeg for the luma
    channel of a colour JPEG, as TensorFlow's ``channels=1`` does; with
    ``key_alpha`` a gray or RGB PNG's transparent colour (tRNS) becomes an
    alpha channel, as TensorFlow's ``channels=4`` gives it."""
    with pillow_open(data) as im:  # Pillow's own pixel limit applies beside this package's
        if gray_jpeg and im.format == "JPEG" and im.mode in ("RGB", "YCbCr"):
            im.draft("L", im.size)
        sixteen = _sixteen_bit(im, data) if im.format == "PNG" else None
        if sixteen is not None:
            return [sixteen]
        frames = [_array(im, key_alpha)]
        if all_frames:
            for index in range(1, int(getattr(im, "n_frames", 1))):
                im.seek(index)
                frames.append(_array(im, key_alpha))
    return frames


def _array(im, key_alpha: bool = False) -> np.ndarray:
    mode = im.mode
    if key_alpha and mode in ("L", "RGB") and "transparency" in im.info:
        im = im.convert("LA" if mode == "L" else "RGBA")  # the keyed colour gets alpha 0
    elif mode == "P" or mode == "PA":
        im = im.convert("RGBA" if mode == "PA" or "transparency" in im.info else "RGB")
    elif mode in ("1", "CMYK", "YCbCr"):
        im = im.convert("L" if mode == "1" else "RGB")
    elif mode not in ("L", "LA", "RGB", "RGBA") and not mode.startswith("I;16"):
        raise ValueError(f"pixels of mode {mode!r} are not 8- or 16-bit samples")
    array = np.asarray(im)
    if array.dtype != np.uint8:
        array = array.astype(np.uint16)  # I;16 (little-endian) and I;16B alike
    if array.ndim == 2:
        array = array[:, :, None]
    return array


def _sixteen_bit(im, data: bytes) -> np.ndarray | None:
    """Exact samples of a 16-bit RGB, RGBA or gray+alpha PNG, else None."""
    tile = im.tile[0] if len(im.tile) == 1 else None
    if tile is None or tile.codec_name != "zip":
        return None
    rawmode = tile.args if isinstance(tile.args, str) else tile.args[0]
    if rawmode == "LA;16B":  # 32 bits a pixel: read them whole as one big-endian int
        words = _load(data, "I", "I;32B", tile).view(np.uint32)
        return np.stack([words >> 16, words & 0xFFFF], axis=2).astype(np.uint16)
    if rawmode not in _16BIT:
        return None
    mode, low = _16BIT[rawmode]
    high = _load(data, mode, rawmode, tile).astype(np.uint16)
    return high << 8 | _load(data, mode, low, tile)


def _load(data: bytes, mode: str, rawmode: str, tile) -> np.ndarray:
    with pillow_open(data) as im:
        im._mode = mode
        args = rawmode if isinstance(tile.args, str) else (rawmode,) + tuple(tile.args[1:])
        im.tile = [tile._replace(args=args)]
        im.load()
        return np.asarray(im)
