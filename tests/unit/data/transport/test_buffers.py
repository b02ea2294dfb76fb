"""data/transport/: the buffers the image engine decodes batches into, given
to it by the dataset (the engine itself knows no DataLoader)."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image as PILImage

from tfrecord_torch import ImageBatching
from tfrecord_torch.data.transport import BatchBuffers, BufferPool, SharedBuffers, Shipped
from tfrecord_torch.features.images.engine import DecodeEngine


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (16, 20, 3), dtype=np.uint8)
    out = io.BytesIO()
    PILImage.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def test_the_engine_decodes_into_the_buffers_it_is_given():
    images = [_jpeg(i) for i in range(4)]
    with DecodeEngine(ImageBatching(threads=2)) as fresh:
        expected = fresh.decode(images)[0]
    with DecodeEngine(ImageBatching(threads=2), buffers=BatchBuffers()) as engine:
        first = engine.decode(images)[0]
        address = first.data_ptr()
        second = engine.decode(images[::-1])[0]
        assert second.data_ptr() != address  # the first batch is still held: not written into
        assert torch.equal(first, expected) and torch.equal(second, expected.flip(0))
        del first
        third = engine.decode(images)[0]
        assert third.data_ptr() == address  # let go of: its buffer is used again
        assert torch.equal(third, expected)


def test_in_the_main_process_a_batch_is_a_plain_tensor():
    buffers = BatchBuffers()
    tensor, token = buffers.take((2, 3), np.uint8, zero=True)
    assert token is None and not tensor.any()
    assert type(buffers.ship(tensor, token)) is torch.Tensor


def test_the_namespace_exports_the_transport():
    import tfrecord_torch.data.transport as transport

    assert transport.__all__ == sorted(transport.__all__)
    assert {BatchBuffers, BufferPool, SharedBuffers, Shipped} == {getattr(transport, n) for n in transport.__all__}
