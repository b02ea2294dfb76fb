"""Deferred results (tfrecord_torch/_pending.py): each kind gives its value,
or its error, only when ``.result()`` is asked for; and the batch image
engine hands back one of them."""

import io

import numpy as np
import pytest
import torch
from PIL import Image as PILImage

from tfrecord_torch import ImageBatching
from tfrecord_torch._pending import Done, Failed, Later, Pending
from tfrecord_torch.features.images.engine import DecodedImages, DecodeEngine


def test_done_gives_its_value():
    value = {"a": 1}
    pending = Done(value)
    assert isinstance(pending, Pending)
    assert pending.result() is value
    assert pending.result() is value


def test_later_calls_its_function_only_when_asked():
    calls = []

    def add(a, b):
        calls.append((a, b))
        return a + b

    pending = Later(add, 2, 3)
    assert calls == []
    assert pending.result() == 5
    assert calls == [(2, 3)]


def test_later_raises_what_its_function_raises_when_asked():
    def broken():
        raise KeyError("missing")

    pending = Later(broken)  # nothing raised while starting
    with pytest.raises(KeyError, match="missing"):
        pending.result()


def test_failed_raises_its_error_when_asked():
    error = ValueError("refused")
    pending = Failed(error)
    with pytest.raises(ValueError, match="refused") as caught:
        pending.result()
    assert caught.value is error


def test_a_subclass_gives_its_own_result():
    class Counted(Pending[int]):
        def __init__(self):
            self.asked = 0

        def result(self) -> int:
            self.asked += 1
            return self.asked

    pending = Counted()
    assert pending.result() == 1 and pending.result() == 2


def test_the_base_class_has_no_result():
    with pytest.raises(NotImplementedError):
        Pending().result()


def _png(value: int) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(np.full((6, 5, 3), value, np.uint8)).save(out, format="PNG")
    return out.getvalue()


def test_engine_start_gives_a_pending_batch_equal_to_decode():
    images = [_png(10), b"not an image", _png(200)]
    with DecodeEngine(ImageBatching(threads=2, size=(6, 5))) as engine:
        pending = engine.start(images)
        assert isinstance(pending, Pending)
        started = pending.result()
        decoded = engine.decode(images)
    assert isinstance(started, DecodedImages)
    assert started.pixels.shape == (3, 3, 6, 5)
    assert started.sizes is None
    assert sorted(started.failures) == [1]
    assert started.pixels[0].unique().tolist() == [10]
    assert started.pixels[1].unique().tolist() == [0]  # a failed image's slot is zero-filled
    assert started.pixels[2].unique().tolist() == [200]
    assert torch.equal(started.pixels, decoded.pixels)
