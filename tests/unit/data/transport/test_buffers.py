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


def test_the_next_iteration_decodes_into_the_buffers_the_last_one_let_go_of():
    """Each pass over a dataset is a new iteration with its own engine: in
    the main process it takes the buffers the last one kept (their pages
    mapped already), not fresh ones; a buffer still held by the caller is
    never among them."""
    shape = (64, 256, 256, 3)
    last = BatchBuffers()  # alive, as an earlier iteration's engine may be
    held, _ = last.take(shape, np.uint8, zero=False)
    dropped, _ = last.take(shape, np.uint8, zero=False)
    address = dropped.data_ptr()
    del dropped
    last.close()
    nxt = BatchBuffers()
    first, _ = nxt.take(shape, np.uint8, zero=False)
    second, _ = nxt.take(shape, np.uint8, zero=False)
    assert first.data_ptr() == address
    assert held.data_ptr() not in (first.data_ptr(), second.data_ptr())


def test_what_an_iteration_keeps_for_the_next_is_bounded():
    """Closed, an iteration's pool keeps at most KEPT_BETWEEN bytes of
    buffers (NumPy's memory, traced by tracemalloc): of three buffers a
    third of it long, two stay."""
    import tracemalloc

    from tfrecord_torch.data.transport.buffers import KEPT_BETWEEN

    size = KEPT_BETWEEN // 3 + 1
    tracemalloc.start()
    try:
        buffers = BatchBuffers()
        taken = [buffers.take((size,), np.uint8, zero=False)[0] for _ in range(3)]
        del taken
        before = tracemalloc.get_traced_memory()[0]
        buffers.close()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert before >= 3 * size and before - after >= size and after >= 2 * size


def test_a_forked_child_starts_with_no_buffers_of_its_parent():
    """What the parent keeps is the parent's: a forked child's pools start
    empty, with locks of their own (a parent thread may hold one at the fork)."""
    import os

    from tfrecord_torch.data.transport import buffers as module

    parent = BatchBuffers()
    tensor, _ = parent.take((4, 8), np.uint8, zero=False)
    address = tensor.data_ptr()
    del tensor
    module._POOLS[3]._lock.acquire()  # held by "another thread" at the fork
    try:
        pid = os.fork()
        if pid == 0:
            got, _ = BatchBuffers().take((4, 8), np.uint8, zero=False)  # would hang on the parent's lock
            os._exit(0 if all(len(p._held) <= 1 for p in module._POOLS.values()) and got.shape == (4, 8) else 1)
    finally:
        module._POOLS[3]._lock.release()
    assert os.waitpid(pid, 0)[1] == 0
    again, _ = parent.take((4, 8), np.uint8, zero=False)
    assert again.data_ptr() == address


def test_buffers_the_caller_keeps_for_good_do_not_stop_the_reuse_of_later_ones():
    """A pool shared by iterations may be full of batches the caller keeps
    (a batch kept to look at later): it then keeps the newest buffers, so
    the ones let go of next are used again."""
    import weakref

    pool = BufferPool(keep=3)
    kept = [pool.take((1000,), np.uint8) for _ in range(3)]
    made = pool.take((1000,), np.uint8)
    ref = weakref.ref(made)
    del made
    again = pool.take((1000,), np.uint8)
    assert ref() is again
    assert all(again is not k for k in kept)
