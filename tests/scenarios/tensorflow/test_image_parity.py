"""Decoded pixels equal TensorFlow's decode of the same bytes, for every format,
layout and channel choice, with libjpeg-turbo through simplejpeg (JPEGs),
torchvision's decoders and the Pillow fallback used when TensorFlow was
imported first."""

import io

import numpy as np
import pytest
import tensorflow as tf
import torch
from PIL import Image as PILImage

from tfrecord_torch.features.images import decode as images
from tfrecord_torch.features.images.channels import convert_channels
from tfrecord_torch.features.images.decode import decode_image

MODES = {"unchanged": 0, "L": 1, "RGB": 3, "RGBA": 4}
rng = np.random.default_rng(13)


@pytest.fixture(params=["simplejpeg", "torchvision", "pillow"])
def decoder(request, monkeypatch):
    if request.param != "simplejpeg":  # the decoders JPEGs fall back to
        monkeypatch.setattr(images, "_libjpeg", lambda data, gray: None)
    if request.param == "pillow":
        monkeypatch.setattr(images, "_torchvision_usable", lambda: False)
    return request.param


def pil(array_or_image, fmt, **kw):
    im = array_or_image if isinstance(array_or_image, PILImage.Image) else PILImage.fromarray(array_or_image)
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


def hwc(tensor):
    return tensor.permute(1, 2, 0).numpy()


def smooth(h, w, c):
    """A photo-like image (JPEG-friendly blocks with noise)."""
    base = np.kron(rng.integers(0, 256, (h // 8, w // 8, c)), np.ones((8, 8, 1)))
    return np.clip(base + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8)


def png_cases():
    a = rng.integers(0, 256, (9, 11, 4), dtype=np.uint8)
    palette = PILImage.fromarray(a[:, :, :3]).convert("P", palette=PILImage.ADAPTIVE, colors=16)
    return {
        "gray": pil(a[:, :, 0], "PNG"), "gray+alpha": pil(PILImage.fromarray(a[:, :, :2], "LA"), "PNG"),
        "rgb": pil(a[:, :, :3], "PNG"), "rgba": pil(a, "PNG"), "palette": pil(palette, "PNG"),
        "palette+tRNS": pil(palette, "PNG", transparency=3), "1-bit": pil(a[:, :, 0] > 127, "PNG"),
        "gray+tRNS": pil(a[:, :, 0], "PNG", transparency=7),
        **{f"16-bit {c}ch": tf.io.encode_png(rng.integers(0, 65536, (9, 11, c), dtype=np.uint16)).numpy()
           for c in (1, 2, 3, 4)},
    }


@pytest.mark.parametrize("case", list(png_cases()))
@pytest.mark.parametrize("mode", list(MODES))
def test_png_equals_tensorflow(case, mode):
    data = png_cases()[case]
    sixteen = case.startswith("16-bit") and mode == "unchanged"
    want = tf.io.decode_png(data, channels=MODES[mode], dtype=tf.uint16 if sixteen else tf.uint8).numpy()
    got = decode_image(data, mode)
    assert got.dtype == (torch.uint16 if sixteen else torch.uint8)
    if mode == "RGBA" and case in ("palette", "1-bit"):
        # TF's added alpha is 2**bit_depth - 1 for PNGs under 8 bits (15 for a 16-colour
        # palette, 1 for 1-bit gray): a TF quirk we do not copy; opaque is 255 here.
        assert (want[:, :, 3] == (15 if case == "palette" else 1)).all() and (hwc(got)[:, :, 3] == 255).all()
        want = want[:, :, :3]
        got = got[:3]
    assert np.array_equal(hwc(got), want)


def test_16_bit_values_are_exact_not_clipped():
    values = np.array([[0, 255, 256, 40000, 65535]], np.uint16)[:, :, None]
    data = tf.io.encode_png(values).numpy()
    assert hwc(decode_image(data, "unchanged"))[0, :, 0].tolist() == [0, 255, 256, 40000, 65535]
    assert hwc(decode_image(data, "L"))[0, :, 0].tolist() == [0, 0, 1, 156, 255]  # high bytes, as TF


def jpeg_cases():
    rgb = smooth(48, 64, 3)
    return {"baseline": pil(rgb, "JPEG", quality=90), "progressive": pil(rgb, "JPEG", quality=90, progressive=True),
            "gray": pil(rgb[:, :, 0], "JPEG"), "cmyk": pil(PILImage.fromarray(rgb).convert("CMYK"), "JPEG"),
            "4:2:0 odd size": pil(smooth(56, 72, 3)[:51, :67], "JPEG", quality=75, subsampling=2)}


@pytest.mark.parametrize("case", list(jpeg_cases()))
@pytest.mark.parametrize("mode", ["unchanged", "L", "RGB"])
def test_jpeg_equals_tensorflow_integer_accurate(case, mode, decoder):
    data = jpeg_cases()[case]
    planes = decode_image(data, mode)
    assert planes.is_contiguous()
    got = hwc(planes).astype(int)
    if case == "cmyk" and mode == "L":  # TF refuses; we take the luma of TF's RGB with libpng's weights
        rgb = tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE").numpy()
        assert np.array_equal(got, convert_channels(rgb, 1))
        return
    accurate = tf.io.decode_jpeg(data, channels=MODES[mode], dct_method="INTEGER_ACCURATE").numpy()
    assert np.array_equal(got, accurate)
    fast = tf.io.decode_jpeg(data, channels=MODES[mode]).numpy().astype(int)
    assert np.abs(got - fast).max() <= 5  # TF's default (fast) IDCT, on these small cases (photographs: more)


def test_a_jpeg_with_corrupt_entropy_data_decodes_as_tensorflow_decodes_it():
    """libjpeg decodes it with a warning ("premature end of data segment"),
    which simplejpeg makes an error: the image takes the fallback decoder and
    gives TensorFlow's pixels, as a clean JPEG does."""
    data = bytearray(jpeg_cases()["4:2:0 odd size"])
    middle = len(data) * 2 // 3
    data[middle:middle + 2] = b"\xff\xd3"  # a restart marker where none belongs
    data = bytes(data)
    assert images._libjpeg(data, False) is None
    want = tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE").numpy()
    got = decode_image(data)
    assert got.is_contiguous() and np.array_equal(hwc(got), want)


def fast_cases():
    cases = jpeg_cases()
    rgb = smooth(64, 80, 3)
    cases.update({"4:4:4 q95": pil(rgb, "JPEG", quality=95, subsampling=0),
                  "4:2:0 q95": pil(rgb, "JPEG", quality=95, subsampling=2),
                  "progressive gray": pil(rgb[:, :, 1], "JPEG", quality=95, progressive=True),
                  "tf.io.encode_jpeg": tf.io.encode_jpeg(rgb, quality=95).numpy()})
    return cases


@pytest.mark.parametrize("case", list(fast_cases()))
@pytest.mark.parametrize("mode", ["unchanged", "L", "RGB"])
def test_jpeg_fast_equals_tensorflow_default_dct_method(case, mode, decoder):
    """decoder="fast" is TF's default decode bit for bit, decode_jpeg's and
    decode_image's, whatever decoders the other formats fall back to."""
    data = fast_cases()[case]
    got = hwc(decode_image(data, mode, decoder="fast"))
    if case == "cmyk" and mode == "L":  # TF refuses; the luma of TF's RGB with libpng's weights, as "accurate"
        assert np.array_equal(got, convert_channels(tf.io.decode_jpeg(data, channels=3).numpy(), 1))
        return
    want = tf.io.decode_jpeg(data, channels=MODES[mode]).numpy()
    assert np.array_equal(got, want)
    assert np.array_equal(got, tf.io.decode_image(data, channels=MODES[mode]).numpy())
    if case != "gray":  # the option is not ignored: the accurate IDCT gives other pixels
        assert not np.array_equal(got, tf.io.decode_jpeg(data, channels=MODES[mode],
                                                         dct_method="INTEGER_ACCURATE").numpy())


def test_a_corrupt_jpeg_decodes_fast_as_tensorflow_and_a_cut_one_is_refused_as_by_tensorflow():
    data = bytearray(jpeg_cases()["4:2:0 odd size"])
    middle = len(data) * 2 // 3
    data[middle:middle + 2] = b"\xff\xd3"  # a restart marker where none belongs: a warning in libjpeg
    want = tf.io.decode_jpeg(bytes(data), channels=3).numpy()
    assert np.array_equal(hwc(decode_image(bytes(data), decoder="fast")), want)
    whole = jpeg_cases()["progressive"]
    for cut in (whole[:len(whole) * 2 // 3], whole[:-2]):
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.decode_jpeg(cut, channels=3)
        with pytest.raises(ValueError, match="Premature end of JPEG file"):
            decode_image(cut, decoder="fast")


def test_rgba_from_a_jpeg_is_a_clear_error():
    with pytest.raises(ValueError, match="JPEG has no alpha channel"):
        decode_image(jpeg_cases()["baseline"], "RGBA")


def animated_gif(frames=3, size=(16, 20)):
    ims = [PILImage.fromarray(rng.integers(0, 256, size + (3,), dtype=np.uint8))
           .convert("P", palette=PILImage.ADAPTIVE, colors=32) for _ in range(frames)]
    buf = io.BytesIO()
    ims[0].save(buf, format="GIF", save_all=True, append_images=ims[1:], duration=10, loop=0)
    return buf.getvalue()


@pytest.mark.parametrize("mode", list(MODES))
def test_gif_first_and_all_frames_equal_tensorflow(mode, decoder):
    data = animated_gif()
    frames = tf.io.decode_gif(data).numpy()  # [N, H, W, 3]
    first = tf.io.decode_image(data, expand_animations=False).numpy()
    want = [convert_channels(f, MODES[mode] or 3) for f in frames]  # TF allows only 0 and 3 for GIF
    assert np.array_equal(convert_channels(first, MODES[mode] or 3), want[0])
    got = decode_image(data, mode)
    assert got.dim() == 3 and np.array_equal(hwc(got), want[0])  # never 4-D unless asked
    every = decode_image(data, mode, frames="all")
    assert every.shape[0] == len(frames) == 3
    assert all(np.array_equal(hwc(g), w) for g, w in zip(every, want))


@pytest.mark.parametrize("channels", [3, 4])
@pytest.mark.parametrize("mode", list(MODES))
def test_webp_equals_tensorflow(channels, mode, decoder):
    data = pil(rng.integers(0, 256, (12, 10, channels), dtype=np.uint8), "WEBP", lossless=True)
    # TF's WebP decoder gives only the stored channel count; other choices
    # convert TF's pixels with the PNG arithmetic
    tf_channels = MODES[mode] if MODES[mode] in (0, channels) else 0
    want = tf.io.decode_image(data, channels=tf_channels, expand_animations=False).numpy()
    want = convert_channels(want, MODES[mode] or channels)
    assert np.array_equal(hwc(decode_image(data, mode)), want)


@pytest.mark.parametrize("mode", ["unchanged", "RGB"])
def test_bmp_equals_tensorflow(mode):
    data = pil(rng.integers(0, 256, (7, 9, 3), dtype=np.uint8), "BMP")
    want = tf.io.decode_image(data, channels=MODES[mode]).numpy()
    assert np.array_equal(hwc(decode_image(data, mode)), want)


def adam7_png16(a):
    """An interlaced (Adam7) 16-bit PNG, which neither Pillow nor TF writes."""
    import struct
    import zlib

    h, w, c = a.shape
    rows = []
    for xs, ys, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)]:
        sub = a[ys::dy, xs::dx]
        if sub.size:
            rows.extend(b"\x00" + row.astype(">u2").tobytes() for row in sub)

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", w, h, 16, {1: 0, 2: 4, 3: 2, 4: 6}[c], 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"".join(rows))) + \
        chunk(b"IEND", b"")


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_interlaced_16_bit_png_equals_tensorflow(channels):
    data = adam7_png16(rng.integers(0, 65536, (11, 13, channels), dtype=np.uint16))
    want = tf.io.decode_png(data, dtype=tf.uint16).numpy()
    assert np.array_equal(hwc(decode_image(data, "unchanged")), want)
    assert np.array_equal(hwc(decode_image(data, "RGB")), tf.io.decode_png(data, channels=3).numpy())


def test_gif_frames_smaller_than_the_canvas_differ_from_tensorflow_as_documented(decoder):
    """TF sizes the output by the first frame when it is smaller than the GIF's
    logical screen; here the output is the screen (the GIF spec, Pillow and
    torchvision), the frame at its place on it. The README says so."""
    from unit.features.images import test_limits as test_image_limits

    data = test_image_limits.gif_bomb(frames=5, size=20)  # 1x1 frames at (0, 0) on a 20x20 screen
    theirs = tf.io.decode_image(data, expand_animations=False).numpy()
    ours = hwc(decode_image(data))
    assert theirs.shape == (1, 1, 3) and ours.shape == (20, 20, 3)
    assert np.array_equal(ours[:1, :1], theirs)
    assert decode_image(data, frames="all").shape == (5, 3, 20, 20)


@pytest.mark.parametrize("layout", ["L", "RGB"])
def test_transparent_colour_becomes_alpha_as_in_tensorflow(layout):
    # a pixel equal to the tRNS colour: TF's channels=4 gives it alpha 0 (the case's
    # random data above holds such a pixel only sometimes)
    a = np.arange(99, dtype=np.uint8).reshape(9, 11)
    pixels = a if layout == "L" else np.stack([a, a, a], axis=2)
    key = 7 if layout == "L" else (7, 7, 7)
    data = pil(pixels, "PNG", transparency=key)
    for mode in MODES:
        want = tf.io.decode_png(data, channels=MODES[mode]).numpy()
        assert np.array_equal(hwc(decode_image(data, mode)), want), mode
    assert hwc(decode_image(data, "RGBA"))[0, 7, 3] == 0
