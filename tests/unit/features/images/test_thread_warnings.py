"""Decoding on other threads leaves the process's warnings alone.

``warnings.catch_warnings`` swaps the process's filters and handler, not a
thread's: the decoders once silenced torchvision's DeprecationWarning and
Pillow's DecompressionBombWarning with it on the decode threads, and a user's
``catch_warnings(record=True)`` on the main thread lost ``on_error="warn"``'s
warnings (CI, tests/unit/data/test_decodeahead.py) while a decode thread sat
in its "ignore" window. The decoders now avoid the warnings instead
(decode.torchvision_decode, limits.pillow_open); ruff's TID251 keeps
catch_warnings out of the package (pyproject.toml).
"""

import threading
import warnings

import numpy as np
import pytest
from helpers import png_bytes
from PIL import Image as PILImage

from tfrecord_torch import Batching, Image, ImageBatching, Int64, RecordWriter, TFRecordDataset, make_example
from tfrecord_torch.features.images import decode_image
from tfrecord_torch.features.images.limits import read_header
from tfrecord_torch.features.images.masks import decode_mask

RNG = np.random.default_rng(0)
PIXELS = RNG.integers(0, 255, (40, 48, 3), dtype=np.uint8)
# each through a decoder that once silenced a warning: Pillow's header sniff and decode (BMP, TIFF),
# Pillow's PNG decoder, torchvision's decode_image (GIF, WebP); and the mask decoder below
ENCODED = [png_bytes(PIXELS, fmt, **kw) for fmt, kw in
           [("BMP", {}), ("TIFF", {}), ("GIF", {}), ("PNG", {}), ("WEBP", {"lossless": True})]]
MASK = png_bytes(RNG.integers(0, 4, (40, 48), dtype=np.uint8), "PNG")


def _decode_all():
    for data in ENCODED:
        decode_image(data)
    decode_mask(MASK)


def test_a_users_warnings_are_all_recorded_while_images_decode_on_eight_threads():
    stop = threading.Event()
    errors = []

    def decode():
        try:
            while not stop.is_set():
                _decode_all()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=decode) for _ in range(8)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filters, shown = warnings.filters, warnings.showwarning
        swapped = 0
        for t in threads:
            t.start()
        try:
            for i in range(2000):
                warnings.warn(f"the user's warning {i}", UserWarning, stacklevel=1)
                swapped += warnings.filters is not filters or warnings.showwarning is not shown
                if i % 50 == 0:
                    stop.wait(0.001)  # let the decode threads run
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert not errors
    assert swapped == 0
    assert [str(w.message) for w in caught] == [f"the user's warning {i}" for i in range(2000)]


def test_on_error_warn_reaches_the_users_catch_warnings_with_decode_threads(tmp_path):
    """As the docs show it: ``on_error="warn"`` with decode threads, every skip a warning."""
    bad = set(range(3, 200, 7))
    path = tmp_path / "mixed.tfrecord"
    with RecordWriter(path) as w:
        for i in range(200):
            data = b"not an image" if i in bad else ENCODED[i % len(ENCODED)]
            w.write(make_example({"image": data, "label": i}))
    for _ in range(3):
        ds = TFRecordDataset(str(path), features={"image": Image(), "label": Int64()}, on_error="warn",
                             batching=Batching(images=ImageBatching(threads=2)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            labels = [int(item["label"]) for item in ds]
        skipped = [str(w.message) for w in caught if "skipped a record" in str(w.message)]
        assert labels == [i for i in range(200) if i not in bad]
        assert [f"record {i} " in m for i, m in zip(sorted(bad), skipped)] == [True] * len(bad)
        assert len(skipped) == len(bad)


def test_pillows_own_limit_applies_and_its_refusal_says_which_limit(monkeypatch):
    """Pillow's warning is no longer silenced: past PIL.Image.MAX_IMAGE_PIXELS
    it warns, past twice that it refuses, naming its knob."""
    bmp = ENCODED[0]
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 40 * 48 - 1)
    with pytest.warns(PILImage.DecompressionBombWarning):
        assert decode_image(bmp).shape == (3, 40, 48)
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 40 * 48 // 2 - 1)
    with pytest.raises(ValueError, match=r"PIL\.Image\.MAX_IMAGE_PIXELS: raise it"):
        decode_image(bmp)


def test_pillows_other_header_errors_still_say_the_bytes_are_not_an_image(monkeypatch):
    """Only Pillow's limit passes through the header sniff as it is; another
    ValueError of Pillow's reading a header is named as unreadable bytes."""
    def broken(fp, *args, **kwargs):
        raise ValueError("bad header field")

    monkeypatch.setattr(PILImage, "open", broken)
    with pytest.raises(ValueError, match=r"not an image format this package reads \(ValueError: bad header field\)"):
        read_header(ENCODED[0])
