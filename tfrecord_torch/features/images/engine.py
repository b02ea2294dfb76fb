"""The batch image engine: a small thread pool decoding a batch's images
straight into one preallocated uint8 buffer.

libjpeg-turbo (through simplejpeg or the compiled crop helper), torch's
antialiased resize kernel and NumPy's copies all release the GIL, so the
threads of one process use every core it has. No multi-threaded torch
operator runs on the way (torch's own thread pool would fight the decode
threads): the resize kernel handles one image per call, on the calling
thread. Each image is decoded into its slot of a [B, H, W, 3] buffer -- or,
when a transform's head is fused (:mod:`.crop`), decoded only inside its
crop window, then resized and flipped into the slot. The buffer is returned
as [B, 3, H, W] in ``torch.channels_last`` memory format (a view, no copy),
or as [B, H, W, 3]. Where the buffer lives is the caller's choice (a
:class:`BufferProvider`): the datasets pass
:class:`tfrecord_torch.data.transport.BatchBuffers`, whose buffers cross
from a DataLoader worker to the main process without a copy; without one,
each batch gets a fresh buffer.

An image that fails to decode leaves its slot zero-filled and is reported
to the caller, which drops it under ``on_error`` (or raises).
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from tfrecord_torch._args import check_choice, check_int
from tfrecord_torch._pending import Pending
from tfrecord_torch._threads import OwnedPool
from tfrecord_torch.features.images.crop import Box, CropParams, CropPlan, crop_params_batch, resize_into
from tfrecord_torch.features.images.decode import decode_hwc
from tfrecord_torch.features.images.jpeg import (
    JPEG_DECODERS,
    JpegClaims,
    check_decoder,
    decode_jpeg,
    decode_jpeg_window,
    fast_jpeg,
)
from tfrecord_torch.features.images.limits import Header, check_pixels, read_headers

__all__ = ["LAYOUTS", "BufferProvider", "DecodeEngine", "DecodedImages", "FreshBuffers", "ImageBatching",
           "MixedSizes", "default_threads"]

LAYOUTS = ("NCHW", "NHWC")


@dataclass(frozen=True)
class ImageBatching:
    """Options of the batch image fast path (``TFRecordDataset(images=...)``).

    Attributes:
        threads: decode threads per process; None: the cores this process may
            use (``os.sched_getaffinity``) divided by the DataLoader's workers.
            The per-sample path (no ``batch_size``) uses as many for records
            holding images (:mod:`~tfrecord_torch.data.decodeahead`); 1
            decodes every record on the iterating thread.
        layout: "NCHW" (uint8 [B, 3, H, W] in channels_last memory) or "NHWC"
            ([B, H, W, 3], contiguous).
        decoder: JPEG IDCT of every :class:`Image` the batch decodes, on the
            fast path and off it (specs with boxes, masks, several images):
            "fast" (``tf.io.decode_jpeg``'s default, bit for bit) or
            "accurate" (``dct_method="INTEGER_ACCURATE"``, torchvision's).
            None (default): each Image's own ``decoder``; where it has none,
            "fast" on the fast path (below) and "accurate" off it (the
            per-sample path's pixels). One that disagrees with an Image's
            own is refused.
        fused: fuse a leading RandomResizedCrop / Resize((h, w)) (+ flip) of the
            transform into decoding; False applies the transform per image.
        normalize: None, or (mean, std) per channel on the 0-1 scale: images
            come out float32, ``(x / 255 - mean) / std``, computed on the threads.
        size: the batch's fixed (height, width): an image of another size is
            refused (a FeatureError, under ``on_error``) unless padding. None:
            a batch of mixed sizes, with no resizing transform, raises
            :class:`~tfrecord_torch.errors.MixedSizesError`.
        pad: smaller images are padded (bottom, right, zeros) to ``size``, or
            to the batch's largest; the batch then holds "<name>_size" (int64
            [B, 2], each image's own size).

    ``layout``, ``normalize``, ``size`` and ``pad`` apply on the fast path
    only (one RGB Image as the spec's only spatial feature, and a transform
    that is fused or not a v2 transform); asked for elsewhere, the dataset
    raises ValueError.
    """

    threads: int | None = None
    layout: str = "NCHW"
    decoder: str | None = None
    fused: bool = True
    normalize: tuple[Sequence[float], Sequence[float]] | None = None
    size: tuple[int, int] | None = None
    pad: bool = False

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.decoder is not None:
            check_choice("ImageBatching.decoder", self.decoder, JPEG_DECODERS)
        check_int("threads", self.threads, minimum=1, optional=True)
        if self.size is not None and (len(self.size) != 2 or any(int(v) < 1 for v in self.size)):
            raise ValueError(f"size must be (height, width), got {self.size!r}")
        if self.normalize is not None and (len(self.normalize) != 2 or
                                           any(len(v) != 3 for v in self.normalize)):
            raise ValueError("normalize must be (mean, std), each three floats (R, G, B)")


class MixedSizes(Exception):
    """A batch's images differ in size and no fixed size was asked for."""


def _decode_threads(options: ImageBatching) -> int:
    return options.threads or default_threads()


def default_threads() -> int:
    """Decode threads for this process: its cores over the DataLoader's workers."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    info = torch.utils.data.get_worker_info()
    workers = 1 if info is None else info.num_workers
    return max(1, cores // workers)


class BufferProvider(Protocol):
    """Where a batch's buffer comes from, and how the batch leaves the engine."""

    def take(self, shape: tuple[int, ...], dtype: np.dtype | type, zero: bool) -> tuple[torch.Tensor, Any]:
        """A tensor of ``shape`` nobody else refers to (zero-filled if ``zero``), and a token for :meth:`ship`."""

    def ship(self, batch: torch.Tensor, token: Any) -> torch.Tensor:
        """``batch`` (a view of the taken tensor) as the caller receives it."""

    def close(self) -> None:
        """The engine is closed: let go of what is kept beyond its next use."""


class FreshBuffers:
    """A new buffer per batch, handed over as it is."""

    def take(self, shape: tuple[int, ...], dtype: np.dtype | type, zero: bool) -> tuple[torch.Tensor, Any]:
        return torch.from_numpy(np.zeros(shape, dtype) if zero else np.empty(shape, dtype)), None

    def ship(self, batch: torch.Tensor, token: Any) -> torch.Tensor:
        return batch

    def close(self) -> None:
        pass


class DecodedImages(NamedTuple):
    """One decoded batch of images.

    Attributes:
        pixels: uint8 (float32 with ``normalize``) [B, 3, H, W] channels_last
            or [B, H, W, 3].
        sizes: int64 [B, 2], the images' own sizes, when padding; else None.
        failures: the position of each image that could not be decoded (its
            slot zero-filled) and its error.
    """

    pixels: torch.Tensor
    sizes: torch.Tensor | None
    failures: dict[int, Exception]


class DecodeEngine:
    """Decodes batches of encoded images with a thread pool it owns.

    Safe to call from several threads (each call has its own buffers; the
    pool is shared). The pool starts at the first batch, in the process that
    decodes -- so a DataLoader worker forked from a parent never inherits
    the parent's threads -- and stops at :meth:`close`.

    Args:
        options: the batch options.
        mode: the images' channels ("RGB", "L", ...), as :class:`Image` decodes them.
        buffers: where each batch's buffer comes from (a :class:`BufferProvider`);
            None: a fresh one per batch.
    """

    def __init__(self, options: ImageBatching, *, mode: str = "RGB", buffers: BufferProvider | None = None) -> None:
        self.options, self.mode = options, mode
        self.decoder = check_decoder(options.decoder or "fast", name="ImageBatching.decoder")
        # the count from the options alone: a function holding the engine would make a cycle, and the
        # engine (with its buffers) would wait for the garbage collector instead of going when dropped
        self._pool = OwnedPool(functools.partial(_decode_threads, options), "tfrecord-decode")
        self._buffers: BufferProvider = buffers if buffers is not None else FreshBuffers()

    def close(self) -> None:
        """Stop the decode threads and join them (a later batch starts them again)."""
        self._pool.close()
        self._buffers.close()

    def __enter__(self) -> DecodeEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def decode(self, images: Sequence[bytes], *, plan: CropPlan | None = None,
               generator: torch.Generator | None = None) -> DecodedImages:
        """Decode one batch: :meth:`start`, then wait for its result."""
        return self.start(images, plan=plan, generator=generator).result()

    def start(self, images: Sequence[bytes], *, plan: CropPlan | None = None,
              generator: torch.Generator | None = None) -> Pending[DecodedImages]:
        """Start decoding one batch on the threads; its ``.result()`` waits
        for them (the caller may read the next batch meanwhile).

        Args:
            images: the encoded images, one per record.
            plan: a fused crop/resize (+ flip) applied to each image, or None.
            generator: draws each image's crop and flip, in batch order.
        """
        failures: dict[int, Exception] = {}
        headers: list[Header | None] = []
        # read_headers gives one Header object per distinct JPEG header, so each is checked once:
        # the batch's Python does not grow with its images
        sound: set[int] = set()
        for i, found in enumerate(read_headers(images)):  # JPEGs in one call, GIL released
            header: Header | None = None
            if isinstance(found, Header):
                if id(found) in sound:
                    header = found
                else:
                    try:
                        check_pixels(found)
                        header = found
                        sound.add(id(found))
                    except ValueError as e:
                        failures[i] = e
            else:
                failures[i] = found
            headers.append(header)
        jobs: list[CropParams | None] = [None] * len(images)
        if plan is not None:
            gen = generator or torch.Generator().manual_seed(0)
            known = [i for i, h in enumerate(headers) if h is not None]
            drawn = crop_params_batch(plan, [(h.height, h.width) for h in headers if h is not None], gen)
            for i, params in zip(known, drawn):
                jobs[i] = params
            height, width = plan.size
        else:
            height, width = self._batch_size(headers, failures)
        sizes = None
        if self.options.pad and plan is None:
            sizes = torch.tensor([[h.height, h.width] if h else [0, 0] for h in headers], dtype=torch.int64)
        dtype = np.uint8 if self.options.normalize is None else np.float32
        zero = bool(failures) or sizes is not None
        shape = (len(images), height, width, 3)
        target = _Target(self._buffers, shape, dtype, zero)
        work = _BatchWork(images, headers, jobs, plan, [i for i in range(len(images)) if i not in failures],
                          self._whole(plan), self.decoder)
        # every thread takes the batch's images one at a time until none is left: they finish it together
        futures = [self._pool.submit(self._share, work, target) for _ in range(min(self._pool.start(), work.size))]
        return _DecodingImages(self, futures, target, sizes, failures)

    def _whole(self, plan: CropPlan | None) -> bool:
        """Whether images of this batch go to their slots exactly as decoded (no crop, normalising, padding)."""
        return plan is None and self.options.normalize is None and not self.options.pad and self.mode == "RGB"

    def _batch_size(self, headers: list[Header | None], failures: dict[int, Exception]) -> tuple[int, int]:
        """The batch's (H, W): the fixed size, else the largest image's. An
        image that does not fit fails; without a fixed size and padding, mixed
        sizes raise MixedSizes."""
        known = {i: h for i, h in enumerate(headers) if h is not None}
        if self.options.size is not None:
            height, width = int(self.options.size[0]), int(self.options.size[1])
        elif not known:
            return 1, 1
        elif self.options.pad:
            return max(h.height for h in known.values()), max(h.width for h in known.values())
        elif len({(h.height, h.width) for h in known.values()}) > 1:
            raise MixedSizes
        else:
            first = next(iter(known.values()))
            return first.height, first.width
        for i, h in known.items():
            smaller = h.height <= height and h.width <= width
            fits = smaller if self.options.pad else (h.height, h.width) == (height, width)
            if not fits:
                failures[i] = ValueError(
                    f"image is {h.height}x{h.width}, but the batch's size is {height}x{width}: pass "
                    f"ImageBatching(pad=True), or a transform starting with v2.Resize((h, w)) or "
                    f"v2.RandomResizedCrop")
                headers[i] = None
        return height, width

    def _share(self, work: _BatchWork, target: _Target) -> dict[int, Exception]:
        """Decode images of ``work`` into ``target``'s buffer, taking each from the
        batch until none is left (other threads take from it too); the errors of
        those that failed here, by position."""
        slots = target.take()[0].numpy()
        errors: dict[int, Exception] = {}
        if work.claims is not None:  # whole JPEGs: taken and decoded in one call without the GIL
            for j, message in work.claims.decode(slots):
                # one that failed is decoded again alone (libjpeg's warnings are decoded there, as Image
                # decodes them); if that fails too, the first error stands
                w = work.whole[j]
                if self._one(work.images[w], work.headers[w], None, None, slots[w]) is not None:
                    errors[w] = ValueError(message)
        while (k := work.take()) is not None:
            error = self._one(work.images[k], work.headers[k], work.jobs[k], work.plan, slots[k])
            if error is not None:
                errors[k] = error
        return errors

    def _one(self, data: bytes, header: Header | None, job: CropParams | None, plan: CropPlan | None,
             slot: np.ndarray) -> Exception | None:
        """Decode one image into ``slot``; its error, or None."""
        try:
            direct = plan is None and self.options.normalize is None and not self.options.pad
            box = job.box if plan is not None and job is not None else None
            image, box = self._pixels(data, header, box, slot if direct else None)
            if plan is not None and box is not None and job is not None:
                target = slot if self.options.normalize is None else np.empty(slot.shape, np.uint8)
                resize_into(image, box, job.flip, plan.resample, target)
                image = target
            if self.options.normalize is not None:
                mean, std = (np.asarray(v, np.float32) for v in self.options.normalize)
                h, w = image.shape[:2]
                np.multiply(image, 1 / (255 * std), out=slot[:h, :w], casting="unsafe")
                slot[:h, :w] -= mean / std
            elif not direct and plan is None:
                slot[:image.shape[0], :image.shape[1]] = image
        except Exception as e:  # noqa: BLE001 - reported per image, the batch goes on
            return e
        return None


    def _pixels(self, data: bytes, header: Header | None, box: Box | None, slot: np.ndarray | None
                ) -> tuple[np.ndarray, Box | None]:
        """The decoded pixels (written into ``slot`` when given) and where
        ``box`` lies in them: a JPEG's window alone where the window decoder
        takes it, else the whole image as :class:`Image` decodes it (CMYK,
        other formats, and corrupt data libjpeg only warns of)."""
        if header is not None and fast_jpeg(header) and self.mode == "RGB":
            try:
                if box is not None:  # only the crop window is decoded
                    return decode_jpeg_window(data, box, decoder=self.decoder), Box(0, 0, box.height, box.width)
                return decode_jpeg(data, decoder=self.decoder, out=slot), box
            except ValueError:  # decoded whole below, which raises where the data cannot be decoded
                pass
        image = decode_hwc(data, self.mode, decoder=self.decoder)
        if slot is not None:
            slot[...] = image
        return image, box


class _Target:
    """A batch's buffer, taken from the provider when the first of its chunks
    starts decoding (or when its result is taken, if it has none): a batch
    started ahead holds no buffer while it waits for a thread, so a
    DataLoader worker keeps fewer shared-memory segments, each costing a
    page fault per 4 KiB when first written."""

    def __init__(self, buffers: BufferProvider, shape: tuple[int, ...], dtype: np.dtype | type,
                 zero: bool) -> None:
        self.buffers, self.shape, self.dtype, self.zero = buffers, shape, dtype, zero
        self._taken: tuple[torch.Tensor, Any] | None = None
        self._lock = threading.Lock()

    def take(self) -> tuple[torch.Tensor, Any]:
        """The buffer and its provider's token (the same for every caller)."""
        with self._lock:
            if self._taken is None:
                self._taken = self.buffers.take(self.shape, self.dtype, self.zero)
            return self._taken


class _BatchWork:
    """One batch's images as its decode threads share them: the whole JPEGs
    (positions ``whole``) through :class:`~.jpeg.JpegClaims`, the rest
    (crops, other formats, normalised or padded images) one at a time
    through :meth:`take`."""

    def __init__(self, images: Sequence[bytes], headers: list[Header | None], jobs: list[CropParams | None],
                 plan: CropPlan | None, work: list[int], whole: bool, decoder: str) -> None:
        self.images, self.headers, self.jobs, self.plan = images, headers, jobs, plan
        self.size = len(work)
        self.whole: list[int] = []
        self.rest: list[int] = []
        # whether a header decodes whole is asked once per distinct Header object (read_headers shares them)
        fast: dict[int, bool] = {}
        for i in work:
            header = headers[i]
            quick = False
            if whole and header is not None:
                known = fast.get(id(header))
                if known is None:
                    known = fast[id(header)] = fast_jpeg(header)
                quick = known
            (self.whole if quick else self.rest).append(i)
        # JpegClaims takes bytes as they are and copies only what is not bytes, once for the batch
        self.claims = JpegClaims([images[k] for k in self.whole], self.whole, decoder=decoder) if self.whole else None
        self._next = itertools.count()  # next() on a count is atomic under the GIL

    def take(self) -> int | None:
        """The position of the next image of ``rest`` nobody has taken; None when none is left."""
        k = next(self._next)
        return self.rest[k] if k < len(self.rest) else None


class _DecodingImages(Pending[DecodedImages]):
    """A batch decoding on the engine's threads: each of ``futures`` gives the
    errors of the images it decoded into ``target``'s buffer, by position."""

    def __init__(self, engine: DecodeEngine, futures: list[Future], target: _Target, sizes: torch.Tensor | None,
                 failures: dict[int, Exception]) -> None:
        self.engine, self.futures = engine, futures
        self.target, self.sizes, self.failures = target, sizes, failures

    def result(self) -> DecodedImages:
        # every thread done with the buffer before anything is raised or handed over: a thread that
        # raised (not an image's error) must not leave another still writing into a buffer the
        # caller may reuse
        wait(self.futures)
        outcomes = [future.result() for future in self.futures]
        buffer, token = self.target.take()
        slots = buffer.numpy()
        for errors in outcomes:
            for i, error in errors.items():
                self.failures[i] = error
                slots[i] = 0
        batch = buffer.permute(0, 3, 1, 2) if self.engine.options.layout == "NCHW" else buffer
        return DecodedImages(self.engine._buffers.ship(batch, token), self.sizes, self.failures)
