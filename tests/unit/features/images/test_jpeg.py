"""The compiled JPEG helper: crop windows against TensorFlow's full decode,
cropped; whole batches decoded in one call; both against the fallback; its
errors and its threads."""

import os

import numpy as np
import pytest
import tensorflow as tf
from helpers import in_threads, png_bytes

from tfrecord_torch.features.images import jpeg as jpeg_module
from tfrecord_torch.features.images.jpeg import (
    JpegClaims,
    crop_decoding_available,
    decode_jpeg,
    decode_jpeg_planes,
    decode_jpeg_window,
    decode_jpegs_into,
    to_planes,
)
from tfrecord_torch.features.images.limits import read_header


def photo(seed, h, w):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, ((xx + yy) % 48) * 5], -1)
    return np.clip(base + rng.normal(0, 16, (h, w, 3)), 0, 255).astype(np.uint8)


# chroma 4:2:0, 4:2:2, 4:4:4, progressive, gray, odd sizes
KINDS = {
    "420": ((75, 101), dict(subsampling=2)),
    "422": ((64, 77), dict(subsampling=1)),
    "444": ((33, 50), dict(subsampling=0)),
    "progressive": ((90, 61), dict(progressive=True)),
    "gray": ((47, 58), dict(gray=True)),
    "tiny": ((3, 5), dict(subsampling=2)),
}


def encode(kind, seed=0):
    (h, w), kw = KINDS[kind]
    kw = dict(kw)
    pixels = photo(seed, h, w)
    if kw.pop("gray", False):
        pixels = pixels[..., 0]
    return png_bytes(pixels, "JPEG", quality=90, **kw), (h, w)


def windows(h, w, n, seed):
    rng = np.random.default_rng(seed)
    out = [(0, 0, h, w), (h - 1, w - 1, 1, 1), (0, w // 2, h, w - w // 2)]
    for _ in range(n):
        ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        out.append((int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw))
    return out


def test_helper_is_built_where_libjpeg_headers_exist():
    """The set-up command builds it on a machine with libjpeg-dev (this one)."""
    if not os.path.exists("/usr/include/jpeglib.h"):
        pytest.skip("no libjpeg headers: the package decodes whole images, then crops")
    assert crop_decoding_available()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_window_equals_tensorflow_decode_then_crop(kind):
    """TensorFlow's full decode, cropped, is the oracle. (Its own
    decode_and_crop_jpeg is not: it differs from its full decode by up to 58
    levels on these images. Ours decodes a margin around the window, so the
    upsampler sees the same neighbours as in a full decode.)"""
    data, (h, w) = encode(kind)
    full = tf.io.decode_jpeg(data, channels=3).numpy()
    for box in windows(h, w, 12, seed=len(kind)):
        top, left, ch, cw = box
        np.testing.assert_array_equal(decode_jpeg_window(data, box), full[top:top + ch, left:left + cw],
                                      err_msg=f"{kind} {box}")


@pytest.mark.parametrize("decoder", ["fast", "accurate"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_window_equals_full_decode_sliced_and_the_fallback(kind, decoder, monkeypatch):
    data, (h, w) = encode(kind, seed=1)
    full = decode_jpeg(data, decoder=decoder)
    boxes = windows(h, w, 20, seed=7)
    helper = [decode_jpeg_window(data, box, decoder=decoder) for box in boxes]
    monkeypatch.setattr(jpeg_module, "_CROP", None)  # where the helper could not be built
    fallback = [decode_jpeg_window(data, box, decoder=decoder) for box in boxes]
    for box, a, b in zip(boxes, helper, fallback):
        top, left, ch, cw = box
        np.testing.assert_array_equal(a, full[top:top + ch, left:left + cw], err_msg=str(box))
        np.testing.assert_array_equal(a, b, err_msg=str(box))


@pytest.mark.parametrize("helper", [True, False])
def test_bad_input_is_a_clear_error(helper, monkeypatch):
    if not helper:
        monkeypatch.setattr(jpeg_module, "_CROP", None)
    data, (h, w) = encode("420")
    # cut short below the window: the rows asked for are all there, the file is not
    with pytest.raises(ValueError, match="Premature end of JPEG file"):
        decode_jpeg_window(data[:len(data) * 3 // 4], (0, 0, 8, 8))
    with pytest.raises(ValueError, match="outside the 75x101 image"):
        decode_jpeg_window(data, (70, 0, 10, 10))
    with pytest.raises(ValueError):
        decode_jpeg_window(b"\xff\xd8\xff\xe0 not a jpeg at all", (0, 0, 1, 1))
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    with pytest.raises(ValueError):
        decode_jpeg_window(bytes(flipped), (0, 0, h, w))


def test_eight_threads_decode_the_same_windows():
    data, (h, w) = encode("420", seed=3)
    boxes = windows(h, w, 40, seed=3)
    expected = [decode_jpeg_window(data, box) for box in boxes]
    failures = []

    def run():
        for box, want in zip(boxes, expected):
            if not np.array_equal(decode_jpeg_window(data, box), want):
                failures.append(box)

    assert not in_threads(run)
    assert not failures


@pytest.mark.parametrize("helper", [True, False])
def test_a_batch_decodes_in_one_call_with_errors_per_image(helper, monkeypatch):
    if not helper:
        monkeypatch.setattr(jpeg_module, "_CROP", None)
    images = [png_bytes(photo(i, 24, 40), "JPEG", quality=90) for i in range(5)]
    truncated = images[2][:len(images[2]) // 2]
    other_size = png_bytes(photo(9, 40, 24), "JPEG", quality=90)
    batch = [images[0], images[1], truncated, images[3], other_size, images[4]]
    out = np.full((6, 24, 40, 3), 7, np.uint8)
    errors = decode_jpegs_into(batch, out)
    assert [e is None for e in errors] == [True, True, False, True, False, True]
    assert errors[2] and ("Premature end of JPEG file" in errors[2] or not helper)  # simplejpeg words it otherwise
    assert errors[4] == "image is 40x24, expected 24x40"
    assert out[2].max() == 0 and out[4].max() == 0  # no stray pixels in a failed slot
    for slot, data in zip((0, 1, 3, 5), (images[0], images[1], images[3], images[4])):
        np.testing.assert_array_equal(out[slot], tf.io.decode_jpeg(data, channels=3).numpy())


@pytest.mark.parametrize("helper", [True, False])
def test_eight_threads_sharing_a_batch_decode_each_image_once(helper, monkeypatch):
    """JpegClaims: every thread calling decode() takes images until none is left; each image is
    decoded by exactly one of them, into its own slot, and each failure is reported once."""
    if helper and not crop_decoding_available():
        pytest.skip("the helper is not built")
    if not helper:
        monkeypatch.setattr(jpeg_module, "_CROP", None)
    good = [png_bytes(photo(i, 24, 40), "JPEG", quality=90) for i in range(30)]
    images = [*good[:7], good[7][:len(good[7]) // 2], *good[8:20], b"\xff\xd8 no jpeg", *good[20:]]
    slots = [len(images) + 2 - i for i in range(len(images))]  # out of order, two slots left alone
    out = np.full((len(images) + 3, 24, 40, 3), 7, np.uint8)
    claims = JpegClaims(images, slots)
    failures, taken = [], []

    def run():
        found = claims.decode(out)
        failures.extend(found)
        taken.append(found)

    assert not in_threads(run)
    assert sorted(i for i, _ in failures) == [7, 20]  # each failure once, from the thread that took it
    assert out[0].min() == out[1].min() == 7 and out[0].max() == out[1].max() == 7  # no slot of nobody's
    for i, data in enumerate(images):
        if i in (7, 20):
            assert out[slots[i]].max() == 0
        else:
            np.testing.assert_array_equal(out[slots[i]], tf.io.decode_jpeg(data, channels=3).numpy())
    assert claims.decode(out) == []  # nothing is left to take: a late thread finds no work


@pytest.mark.parametrize("helper", [True, False])
def test_a_late_thread_finds_the_batch_taken_and_writes_nothing(helper, monkeypatch):
    if helper and not crop_decoding_available():
        pytest.skip("the helper is not built")
    if not helper:
        monkeypatch.setattr(jpeg_module, "_CROP", None)
    images = [png_bytes(photo(i, 16, 16), "JPEG", quality=90) for i in range(3)]
    claims = JpegClaims(images, [0, 1, 2])
    first = np.zeros((3, 16, 16, 3), np.uint8)
    assert claims.decode(first) == []
    later = np.full((3, 16, 16, 3), 9, np.uint8)
    assert claims.decode(later) == []
    assert (later == 9).all()
    assert first.any()


@pytest.mark.parametrize("helper", [True, False])
@pytest.mark.parametrize(("slots", "out", "error"), [
    ([0, -1], (2, 8, 8, 3), "one slot number \\(>= 0\\) per image"),
    ([0], (2, 8, 8, 3), "one slot number"),
    ([0, 2], (2, 8, 8, 3), r"\[>=3, H, W, 3\]"),
    ([0, 1], (2, 8, 8, 4), r"\[>=2, H, W, 3\]"),
    ([0, 1], (2, 0, 8, 3), "H and W 1 to"),
    ([1, 1], (2, 8, 8, 3), r"distinct, one image a slot: \[1, 1\]"),
])
def test_claims_refuse_slots_outside_out(helper, slots, out, error, monkeypatch):
    if helper and not crop_decoding_available():
        pytest.skip("the helper is not built")
    if not helper:
        monkeypatch.setattr(jpeg_module, "_CROP", None)
    images = [png_bytes(photo(i, 8, 8), "JPEG", quality=90) for i in range(2)]
    with pytest.raises(ValueError, match=error):
        JpegClaims(images, slots).decode(np.zeros(out, np.uint8))


def test_helper_refuses_what_is_not_bytes():
    """The compiled call checks its arguments itself too (what the shared check passes it)."""
    if not crop_decoding_available():
        pytest.skip("the helper is not built")
    out = np.empty((1, 4, 4, 3), np.uint8)
    with pytest.raises(TypeError, match=r"images\[0\] is str, not bytes"):
        jpeg_module._CROP.decode_many(["not bytes"], out, 4, 4, True)
    with pytest.raises(ValueError, match="C-contiguous buffer of 2 x 4 x 4 x 3 bytes"):
        jpeg_module._CROP.decode_many([b"", b""], out, 4, 4, True)
    claim, slots = np.zeros(1, np.int64), np.zeros(1, np.int64)
    with pytest.raises(TypeError, match=r"images\[0\] is str, not bytes"):
        jpeg_module._CROP.decode_claimed(["not bytes"], out, slots, claim, 4, 4, True)


@pytest.mark.parametrize("helper", [True, False])
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("shape", [(224, 224), (75, 101), (1, 1), (1, 7), (6, 1), (0, 5), (5, 0), (2, 16),
                                   (3, 17), (1, 33), (4, 47), (7, 5), (1, 15)])
def test_planes_equal_numpy_transpose(helper, flip, shape, monkeypatch):
    """to_planes vs NumPy's transpose (of the mirrored image if flip): the
    helper and the fallback, also from a window that is not contiguous. The
    widths put whole 16-pixel steps of the helper's SSSE3 loop beside a
    remainder of 1 to 15 pixels, mirrored rows included; unmirrored, the
    image is one run of height x width pixels (7 x 5: steps across rows)."""
    if not helper:
        monkeypatch.setattr(jpeg_module, "_PLANES", None)
    image = photo(4, shape[0] + 2, shape[1] + 3)[1:shape[0] + 1, 2:shape[1] + 2]
    assert image.shape == (*shape, 3)
    expected = (image[:, ::-1] if flip else image).transpose(2, 0, 1)
    got = to_planes(image, flip=flip)
    assert got.flags.c_contiguous and got.dtype == np.uint8
    np.testing.assert_array_equal(got, expected)


def test_helper_planes_refuse_a_wrong_size():
    """The compiled call checks both buffers against the size it is given."""
    planes = jpeg_module._PLANES
    if planes is None:
        pytest.skip("the helper is not built")
    image, out = np.zeros((4, 5, 3), np.uint8), np.zeros((3, 4, 5), np.uint8)
    for size in ((4, 6), (5, 5), (-1, 5), (2**62, 2**62)):
        with pytest.raises(ValueError, match="C-contiguous buffers of"):
            planes(image, out, *size, False)
    with pytest.raises(ValueError, match="C-contiguous buffers of"):
        planes(image, np.zeros((3, 4, 4), np.uint8), 4, 5, False)
    planes(image, out, 4, 5, True)


@pytest.mark.parametrize("decoder", ["fast", "accurate"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_planes_decoded_straight_are_tensorflows_pixels(kind, decoder):
    """A JPEG decoded straight to planes: TensorFlow's pixels for the
    decoder's ``dct_method`` (gray ones as RGB), the pixels of simplejpeg's
    decode turned to planes, for every chroma layout, a progressive scan
    and sizes beside and below the 16-pixel steps."""
    if jpeg_module._DECODE_PLANES is None:
        pytest.skip("the helper is not built")
    data, (h, w) = encode(kind, seed=5)
    got = decode_jpeg_planes(data, read_header(data), decoder=decoder)
    assert got is not None and got.shape == (3, h, w) and got.flags.c_contiguous and got.flags.writeable
    method = "" if decoder == "fast" else "INTEGER_ACCURATE"
    np.testing.assert_array_equal(got.transpose(1, 2, 0), tf.io.decode_jpeg(data, channels=3, dct_method=method))
    np.testing.assert_array_equal(got, to_planes(decode_jpeg(data, decoder=decoder)))


def test_planes_of_a_jpeg_libjpeg_warns_of_are_left_to_the_other_decoders(monkeypatch):
    """Cut short, or not a JPEG past its header: None, so the caller's
    decoders decide (and word the error) as before; None too without the helper."""
    data, _ = encode("420")
    header = read_header(data)
    assert decode_jpeg_planes(data[:len(data) * 3 // 4], header, decoder="accurate") is None
    assert decode_jpeg_planes(data[:200] + bytes(300), header, decoder="fast") is None
    monkeypatch.setattr(jpeg_module, "_DECODE_PLANES", None)
    assert decode_jpeg_planes(data, header, decoder="accurate") is None


def test_helper_decode_planes_refuses_a_wrong_size_before_writing():
    """The compiled call checks out against the size it is given, and that
    size against the image's, before any pixel is written."""
    decode = jpeg_module._DECODE_PLANES
    if decode is None:
        pytest.skip("the helper is not built")
    data, (h, w) = encode("420")
    out = np.full((3, h, w), 7, np.uint8)
    for size in ((h, w + 1), (h + 1, w), (-1, w), (h, -w), (0, 0), (2**31, 2**31), (2**62, 2**62)):
        with pytest.raises(ValueError, match="C-contiguous buffer of 3 x"):
            decode(data, out, *size, False)
    with pytest.raises(TypeError, match="read-write bytes-like"):  # not C-contiguous: no buffer given out
        decode(data, np.zeros((3, h, 2 * w), np.uint8)[:, :, ::2], h, w, False)
    with pytest.raises(ValueError, match=f"image is {h}x{w}, expected {w}x{h}"):
        decode(data, np.full((3, w, h), 7, np.uint8), w, h, False)
    assert (out == 7).all()
    read_only = np.zeros((3, h, w), np.uint8)
    read_only.flags.writeable = False
    with pytest.raises((TypeError, BufferError)):
        decode(data, read_only, h, w, False)
    with pytest.raises(TypeError):
        decode("not bytes", out, h, w, False)


def test_eight_threads_decode_the_same_planes():
    if jpeg_module._DECODE_PLANES is None:
        pytest.skip("the helper is not built")
    images = [encode(kind, seed=i)[0] for i, kind in enumerate(sorted(KINDS))]
    expected = [to_planes(decode_jpeg(data, decoder="accurate")) for data in images]
    failures = []

    def run():
        for _ in range(5):
            for data, want in zip(images, expected):
                if not np.array_equal(decode_jpeg_planes(data, read_header(data), decoder="accurate"), want):
                    failures.append(data)

    assert not in_threads(run)
    assert not failures


def test_the_helper_is_built_with_to_planes():
    """Where the helper is built, it is built from these sources: a stale
    build (no to_planes) would pass the other tests on the fallback."""
    if not crop_decoding_available():
        pytest.skip("the helper is not built")
    assert jpeg_module._PLANES is not None


@pytest.mark.parametrize("kind", ["420", "gray"])
def test_gray_at_a_reduced_size_is_libjpegs_scaled_luma(kind):
    """gray=True with min_size: the luma [H', W', 1] at the reduced size,
    as Pillow's draft("L") decodes it (libjpeg's scaled IDCT, accurate)."""
    import io

    from PIL import Image as PILImage

    data, (h, w) = encode(kind)
    got = decode_jpeg(data, decoder="accurate", gray=True, min_size=(h // 2, w // 2))
    image = PILImage.open(io.BytesIO(data))
    image.draft("L", (w // 2, h // 2))
    want = np.asarray(image)
    assert got.shape == (*want.shape, 1)
    np.testing.assert_array_equal(got[:, :, 0], want)


def test_a_decoder_not_offered_is_refused():
    data, _ = encode("420")
    with pytest.raises(ValueError, match=r"decoder must be one of \('fast', 'accurate'\), got 'Accurate'"):
        decode_jpeg(data, decoder="Accurate")


# -- arguments: one check before the helper or the fallback is chosen ----------------------------

def _jpegs():
    return [png_bytes(photo(i, 24, 40), "JPEG", quality=90) for i in range(2)]


def _slots(n=2, dtype=np.uint8, shape=(24, 40, 3)):
    return np.zeros((n, *shape), dtype)


def _read_only():
    out = _slots()
    out.flags.writeable = False
    return out


BAD_ARGUMENTS = {
    "window: a decoder not offered": (lambda: decode_jpeg_window(_jpegs()[0], (0, 0, 4, 4), decoder="bogus"),
                                      ValueError, r"decoder must be one of \('fast', 'accurate'\), got 'bogus'"),
    "window: data of text": (lambda: decode_jpeg_window("not bytes", (0, 0, 4, 4)),
                             TypeError, "data must be bytes .* got str"),
    "window: a float coordinate": (lambda: decode_jpeg_window(_jpegs()[0], (0, 0, 4.0, 4)),
                                   TypeError, "box must be four ints"),
    "window: a bool coordinate": (lambda: decode_jpeg_window(_jpegs()[0], (True, 0, 4, 4)),
                                  TypeError, "box must be four ints"),
    "window: three coordinates": (lambda: decode_jpeg_window(_jpegs()[0], (0, 0, 4)),
                                  TypeError, "box must be four ints"),
    "window: wider than any JPEG": (lambda: decode_jpeg_window(_jpegs()[0], (0, 0, 4, 2**40)),
                                    ValueError, r"crop window \(0, 0, 4, 1099511627776\) is outside any JPEG"),
    "batch: a decoder not offered": (lambda: decode_jpegs_into(_jpegs(), _slots(), decoder="bogus"),
                                     ValueError, r"decoder must be one of \('fast', 'accurate'\), got 'bogus'"),
    "batch: float32 slots": (lambda: decode_jpegs_into(_jpegs(), _slots(dtype=np.float32)),
                             ValueError, r"out must be .* uint8 array \[2, H, W, 3\].*got float32 \[2, 24, 40, 3\]"),
    "batch: a slot too many": (lambda: decode_jpegs_into(_jpegs(), _slots(3)),
                               ValueError, r"got uint8 \[3, 24, 40, 3\]"),
    "batch: a slot too few": (lambda: decode_jpegs_into(_jpegs(), _slots(1)),
                              ValueError, r"got uint8 \[1, 24, 40, 3\]"),
    "batch: no channel axis": (lambda: decode_jpegs_into(_jpegs(), _slots(shape=(24, 120))),
                               ValueError, r"got uint8 \[2, 24, 120\]"),
    "batch: four channels": (lambda: decode_jpegs_into(_jpegs(), _slots(shape=(24, 30, 4))),
                             ValueError, r"got uint8 \[2, 24, 30, 4\]"),
    "batch: slots not contiguous": (lambda: decode_jpegs_into(_jpegs(), _slots(shape=(24, 80, 3))[:, :, ::2]),
                                    ValueError, "not C-contiguous"),
    "batch: read-only slots": (lambda: decode_jpegs_into(_jpegs(), _read_only()), ValueError, "read-only"),
    "batch: a text image": (lambda: decode_jpegs_into(["not bytes", _jpegs()[0]], _slots()),
                            TypeError, r"images\[0\] must be bytes .* got str"),
    "planes: float pixels": (lambda: to_planes(np.zeros((4, 5, 3), np.float32)),
                             ValueError, r"image must be a uint8 array \[H, W, 3\], got float32 \[4, 5, 3\]"),
    "planes: four channels": (lambda: to_planes(np.zeros((4, 5, 4), np.uint8)),
                              ValueError, r"got uint8 \[4, 5, 4\]"),
}


def _on_path(helper, monkeypatch):
    if helper and not crop_decoding_available():
        pytest.skip("the helper is not built")
    if not helper:
        monkeypatch.setattr(jpeg_module, "_CROP", None)
        monkeypatch.setattr(jpeg_module, "_PLANES", None)


@pytest.mark.parametrize("helper", [True, False], ids=["helper", "fallback"])
@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_arguments_get_one_error_on_both_paths(case, helper, monkeypatch):
    """Each mistake gets the same error with the compiled helper and without it (once, the
    helper decoded decoder="bogus" as "accurate" and filled float32 slots the fallback refused)."""
    _on_path(helper, monkeypatch)
    call, error, message = BAD_ARGUMENTS[case]
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("helper", [True, False], ids=["helper", "fallback"])
def test_bytes_like_images_and_any_iterable_decode_alike_on_both_paths(helper, monkeypatch):
    """A bytearray or memoryview decodes as its bytes; a generator of images as their list."""
    _on_path(helper, monkeypatch)
    images = _jpegs()
    want = np.stack([tf.io.decode_jpeg(data, channels=3).numpy() for data in images])
    out = _slots()
    assert decode_jpegs_into((bytearray(data) for data in images), out) == [None, None]
    np.testing.assert_array_equal(out, want)
    out[...] = 7
    assert decode_jpegs_into([memoryview(images[0]), bytes(images[1])], out) == [None, None]
    np.testing.assert_array_equal(out, want)
    for data in (bytearray(images[0]), memoryview(images[0])):
        np.testing.assert_array_equal(decode_jpeg_window(data, (np.int64(2), 3, 5, 7)), want[0, 2:7, 3:10])


# -- decoder="fast": TF's default pixels for every JPEG, or a clear error ---------------------------

def test_check_decoder_names_the_argument_and_the_allowed_values():
    from tfrecord_torch.features.images.jpeg import check_decoder

    assert check_decoder("fast") == "fast" and check_decoder("accurate") == "accurate"
    for bad in ("FAST", "islow", None, 1):
        with pytest.raises(ValueError, match=r"Image.decoder must be one of \('fast', 'accurate'\), got "):
            check_decoder(bad, name="Image.decoder")


def test_fast_without_simplejpeg_is_an_error_saying_how_to_get_it(monkeypatch):
    """torchvision and Pillow have the accurate IDCT only: with no simplejpeg,
    "fast" raises instead of giving their pixels; "accurate" still decodes."""
    from tfrecord_torch.features.images.jpeg import FastDecoderUnavailable, check_decoder, decode_jpeg_fast
    from tfrecord_torch.features.images.limits import read_header

    data = _jpegs()[0]
    monkeypatch.setattr(jpeg_module, "simplejpeg_available", lambda: False)
    assert check_decoder("accurate") == "accurate"
    with pytest.raises(FastDecoderUnavailable, match=r"pip install simplejpeg.*decoder='accurate'"):
        check_decoder("fast")
    with pytest.raises(FastDecoderUnavailable, match="simplejpeg cannot be imported"):
        decode_jpeg_fast(data, read_header(data))


def test_fast_windows_without_the_compiled_helper_are_tf_default_pixels(monkeypatch):
    """Without _jpegcrop the window comes from simplejpeg's whole fast decode:
    the fast IDCT stays available and gives the same pixels as the helper."""
    data = _jpegs()[1]
    box = (3, 5, 14, 22)
    with_helper = decode_jpeg_window(data, box, decoder="fast")
    monkeypatch.setattr(jpeg_module, "_CROP", None)
    without = decode_jpeg_window(data, box, decoder="fast")
    want = tf.io.decode_jpeg(data, channels=3).numpy()[3:17, 5:27]  # TF's default dct_method
    np.testing.assert_array_equal(without, want)
    np.testing.assert_array_equal(with_helper, want)
