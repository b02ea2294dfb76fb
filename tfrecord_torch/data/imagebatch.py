"""Batch mode with images: the batch image engine wired to a dataset's spec,
transform and error policy.

In batch mode a torchvision v2 ``transform=`` is applied to each record, not
to the batch (each image gets its own random crop and flip); a plain
callable still receives the whole batch. The fast path takes a spec with
exactly one RGB :class:`~tfrecord_torch.Image` (besides any number of
non-spatial features such as labels): its images are decoded on the engine's
threads into one buffer, a fusable head of the transform done on the way.
Specs with masks, boxes or several images, and ``images=False``, decode each
record as the per-sample path does (tv_tensors, so a v2 transform moves masks
and boxes with their image), transform it, then stack.

Images and masks always come out as one tensor [B, ...]: a batch whose
values differ in size, with nothing that gives them one size, raises
:class:`SizeMismatch` for the dataset to name the records (a batch's type
never depends on its data).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import default_collate

from tfrecord_torch._pending import Done, Later, Pending
from tfrecord_torch.data.transport.buffers import BatchBuffers
from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.collate import batch_memory
from tfrecord_torch.features.images.crop import CroppedImage, CropPlan, fusable_default, plan_transform
from tfrecord_torch.features.images.engine import DecodedImages, DecodeEngine, ImageBatching, MixedSizes
from tfrecord_torch.features.images.objects import transform_objects
from tfrecord_torch.features.images.specs import Image
from tfrecord_torch.features.specs import _REQUIRED, decode_batch

__all__ = ["DecodedBatch", "ImageBatches", "SizeMismatch", "decoders_for", "drop_rows", "fuse_per_sample",
           "is_v2_transform", "laid_out_for", "refuse_decoder"]

_RESIZE_HINT = ("a transform that gives one size (v2.Resize((h, w)), v2.RandomResizedCrop(s), "
                "v2.CenterCrop(s))")
_PER_SAMPLE_HINT = ("or batch per sample (no batch_size= on the dataset, DataLoader(batch_size=N)) with "
                    "collate_fn=pad_collate, or detection_collate for lists")


class SizeMismatch(Exception):
    """The values of an image or mask feature differ in shape within one batch
    (or some are missing) and nothing gives them one size. The dataset, which
    knows where each record is, names them (:class:`~tfrecord_torch.errors.MixedSizesError`).

    Attributes:
        name, key: the feature's output name and record key.
        shapes: each record's value shape (None: no value), in batch order.
        hint: the options that give the batch one size.
    """

    def __init__(self, name: str, key: str | None, shapes: list[tuple[int, ...] | None], hint: str) -> None:
        super().__init__(f"{name}: values of different shapes in one batch")
        self.name, self.key, self.shapes, self.hint = name, key, shapes, hint


_SHAPING = {"layout": "NCHW", "normalize": None, "size": None, "pad": False}  # options the fast path alone applies


def _refuse_unused(spec: dict, options: ImageBatching) -> None:
    """ValueError when ``options`` asks for a layout, normalisation, size or
    padding that only the fast path gives, for a spec with images or masks
    that the fast path does not take (they would come out without them)."""
    asked = [f"{k}={getattr(options, k)!r}" for k, default in _SHAPING.items() if getattr(options, k) != default]
    if not asked or not any(f.stacks for f in spec.values()):
        return
    if _fast_image(spec) is not None:
        why = ("the v2 transform runs on each record whole (its head is not a fusable "
               "RandomResizedCrop or Resize((h, w)), or fused=False)")
    else:
        spatial = ", ".join(repr(n) for n, f in spec.items() if f.spatial)
        why = (f"its spatial features ({spatial}) are not one RGB Image alone, so each record is decoded "
               f"and transformed whole, its masks and boxes with it")
    raise ValueError(f"images=ImageBatching({', '.join(asked)}) applies to the image fast path only, which this "
                     f"dataset does not take: {why}. Give the size, dtype and layout in the transform instead "
                     f"(v2.Resize((h, w)), v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)); "
                     f"to pad, batch per sample with collate_fn=pad_collate")


def decoders_for(spec: dict, options: ImageBatching | None, *, fast: str | None = None) -> dict:
    """``spec`` (a features= dict) with the JPEG decoder of each :class:`Image`
    settled: its own ``decoder`` if given, else ``options.decoder`` if given,
    else "fast" for the image named ``fast`` (the one batch mode's fast path
    decodes: its default since that path exists) and "accurate" for the
    others (the per-sample path's default, which batch mode's per-record
    decode keeps, so that it gives the per-sample pixels).

    Raises:
        ValueError: ``options.decoder`` disagrees with an Image's own (one
            of the two would be silently ignored), or is given for a spec
            with no Image (nothing would honour it).
        FastDecoderUnavailable: "fast" where it cannot run (see
            :func:`~tfrecord_torch.features.images.jpeg.check_decoder`).
    """
    chosen = options.decoder if options is not None else None
    if not any(isinstance(f, Image) for f in spec.values()):
        refuse_decoder(options, "a dict with no Image")
    out = {}
    for name, feature in spec.items():
        if isinstance(feature, Image):
            if chosen is not None and feature.decoder not in (None, chosen):
                raise ValueError(f"images=ImageBatching(decoder={chosen!r}) disagrees with features[{name!r}] = "
                                 f"Image(decoder={feature.decoder!r}): give the decoder in one place only")
            feature = feature.decoding_with(feature.decoder or chosen or ("fast" if name == fast else "accurate"))
        out[name] = feature
    return out


def refuse_decoder(options: ImageBatching | None, held: str) -> None:
    """Refuse ``options.decoder`` for a dataset whose features (``held``
    says what they are) hold no Image: nothing would honour it.

    Raises:
        ValueError: ``options.decoder`` is given.
    """
    chosen = options.decoder if options is not None else None
    if chosen is not None:
        raise ValueError(f"images=ImageBatching(decoder={chosen!r}) sets the JPEG decoder of the Image features of a "
                         f"features= dict, and this dataset's features is {held}: give Image(..., "
                         f"decoder={chosen!r}) where the spec holds an image, and leave decoder= out of ImageBatching")


def _shapes(values: list) -> list[tuple[int, ...] | None]:
    return [tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in values]


def _decode_columns(columns: dict, spec: dict, size: int) -> dict:
    """Each feature's column as its ``decode_column`` gives it, unstacked: a
    tensor [B, ...] (fixed-shape numbers) or a list of B values, each what the
    per-sample decode gives (``tv_tensors`` kept, so a v2 transform knows a
    mask and boxes from the image)."""
    cache: list = []

    def records() -> list:
        if not cache:
            cache.extend({k: c[i] for k, c in columns.items() if c[i] is not None} for i in range(size))
        return cache

    return {name: feature.decode_column(columns.get(feature.key, [None] * size), records)
            for name, feature in spec.items()}


def is_v2_transform(transform: Any) -> bool:
    """Whether ``transform`` is a torchvision v2 transform (applied per record)."""
    if transform is None:
        return False
    import sys

    if "torchvision.transforms.v2" not in sys.modules:
        return False  # a user with a v2 transform has imported it
    from torchvision.transforms import v2

    return isinstance(transform, v2.Transform)


def _fast_image(spec: dict) -> str | None:
    """The one RGB first-frame Image of ``spec`` with no other spatial feature
    (masks, boxes, more images) beside it, or None."""
    fast = [n for n, f in spec.items() if type(f) is Image and f.mode == "RGB" and f.frames == "first"]
    spatial = [n for n, f in spec.items() if f.spatial and n not in fast]
    return fast[0] if len(fast) == 1 and not spatial else None


def fuse_per_sample(spec: dict, transform: Callable | None, options: ImageBatching | None
                    ) -> tuple[dict, Callable | None]:
    """The (spec, transform) the per-sample path decodes with: when a v2
    ``transform`` starts with a fusable head (RandomResizedCrop or Resize((h, w)),
    + flip) and the spec holds one RGB Image and no other spatial feature,
    the image decodes through :class:`CroppedImage` and the transform keeps
    what follows the head -- the same pixels and RNG draws as unfused.
    ``images=False`` or ``ImageBatching(fused=False)`` keep the transform
    whole; the images are then laid out for it (:func:`laid_out_for`)."""
    spec = decoders_for(spec, options)
    if not is_v2_transform(transform):
        return spec, transform
    name = _fast_image(spec) if options is not None and options.fused else None
    if name is not None and not fusable_default(spec[name].default):  # the transform takes it unfused
        name = None
    plan, rest = plan_transform(transform) if name is not None else (None, [])
    if name is None or plan is None:
        return laid_out_for(spec, transform), transform
    from torchvision.transforms import v2

    fused = {n: CroppedImage(f, plan) if n == name else f for n, f in spec.items()}
    return fused, (v2.Compose(rest) if rest else None)


def laid_out_for(spec: dict, transform: Any) -> dict:
    """``spec`` with its images laid out for the v2 ``transform`` that takes them.

    Images come as C-contiguous planes, which most v2 transforms (crops,
    flips, ToDtype, Normalize, colour) and the collate that stacks them run
    fastest on. A transform that starts by resizing is the exception: torch's
    antialiased uint8 resize reads an image in channels-last memory directly
    but first repacks planes into it, and its output keeps the input's
    layout -- so there the images come as the channels-last view of the
    decoded buffer, no copy made. The values are the same either way.
    """
    if not _resizes_first(transform):
        return spec
    return {n: f.laid_out(planes=False) if isinstance(f, Image) else f for n, f in spec.items()}


def _resizes_first(transform: Any) -> bool:
    from torchvision.transforms import v2

    while isinstance(transform, v2.Compose) and transform.transforms:
        transform = transform.transforms[0]
    return isinstance(transform, (v2.Resize, v2.RandomResizedCrop, v2.RandomShortestSize, v2.RandomResize,
                                  v2.ScaleJitter))


class DecodedBatch(NamedTuple):
    """A decoded batch, before the rows of its failed images are dropped.

    Attributes:
        batch: the decoded features (the failed images' rows zero-filled).
        failures: the FeatureError of each record whose image did not
            decode, by its position in the batch.
    """

    batch: dict
    failures: dict[int, FeatureError]


class ImageBatches:
    """Decodes parsed batches for one iterator (owns the engine's threads).

    Args:
        spec: the dataset's bound spec.
        transform: the dataset's transform (v2: per record; else per batch).
        options: the engine's options, or None to decode as the per-sample
            path does (then stack).
        seed: seeds each batch's crop generator with the batch's number.
        ahead: batches started ahead of the one taken (buffers kept for them).
    """

    def __init__(self, spec: dict, transform: Callable | None, options: ImageBatching | None,
                 seed: tuple[int, ...], ahead: int = 0) -> None:
        self.spec, self.seed = spec, seed
        self.per_record = is_v2_transform(transform)
        self.transform = transform
        self.name = _fast_image(spec) if options is not None else None
        self.plan: CropPlan | None = None
        self.rest: list = []
        self._png: bytes | FeatureError | None = None  # the fast image's default (_default_png)
        if self.name is not None and self.per_record:
            self.plan, self.rest = plan_transform(transform) if options is not None and options.fused \
                else (None, [transform])
            if self.plan is None:
                self.name = None  # an unfused per-image transform needs each image on its own
        if self.per_record and self.name is None:
            self.spec = laid_out_for(spec, transform)
        self.spec = spec = decoders_for(self.spec, options, fast=self.name)
        self.engine = (DecodeEngine(dataclasses.replace(options, decoder=spec[self.name].decoder),
                                    buffers=BatchBuffers(ahead))
                       if self.name is not None and options is not None else None)
        if options is not None and self.engine is None:
            _refuse_unused(spec, options)
        if self.plan is not None and options is not None and options.size is not None and \
                tuple(int(v) for v in options.size) != tuple(self.plan.size):
            raise ValueError(f"images=ImageBatching(size={tuple(options.size)!r}) disagrees with the size the "
                             f"transform's fused head gives, {tuple(self.plan.size)!r}: drop size= or make them equal")
        self.hint = (f"pass images=ImageBatching(size=(H, W)) (other sizes refused) or ImageBatching(pad=True) "
                     f"(padded, with '{self.name}_size'), or {_RESIZE_HINT}; {_PER_SAMPLE_HINT}"
                     if self.engine is not None and self.plan is None else f"pass {_RESIZE_HINT}; {_PER_SAMPLE_HINT}")

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()

    def decode(self, columns: dict, size: int, number: int) -> DecodedBatch:
        """Decode batch ``number`` (its parsed ``columns``, ``size`` records).
        The rows of failed images are still in the batch (zero-filled) for
        the caller to drop or refuse before :meth:`finish`."""
        return self.begin(columns, size, number).result()

    def begin(self, columns: dict, size: int, number: int) -> Pending[DecodedBatch]:
        """:meth:`decode`, started: the images decode on the engine's threads
        while the caller goes on."""
        if self.engine is None or self.name is None:
            if self.per_record:  # decoded now; transformed when the result is taken (torch's global RNG)
                return Later(self._per_record, _decode_columns(columns, self.spec, size), size)
            return Done(DecodedBatch(self._stacked(decode_batch(columns, self.spec, size)), {}))
        feature = self.spec[self.name]
        others = {n: f for n, f in self.spec.items() if n != self.name}
        batch = decode_batch(columns, others, size) if others else {}
        column = columns.get(feature.key, [None] * size)
        failures: dict[int, FeatureError] = {}
        images = []
        for i, value in enumerate(column):
            if value is None and feature.default is not _REQUIRED:  # the default, as the per-sample path gives
                default = self._default_png(feature)
                if isinstance(default, FeatureError):
                    failures[i] = default
                    images.append(b"")
                else:
                    images.append(default)
            elif value is None or len(value) != 1:
                failures[i] = FeatureError(feature.key, "required feature is missing" if value is None
                                           else f"holds {len(value)} images, expected 1")
                images.append(b"")
            else:
                images.append(value[0])
        generator = None  # the crops' draws; no fused crop draws nothing
        if self.plan is not None:
            generator = torch.Generator().manual_seed(
                int(np.random.SeedSequence([*self.seed, number]).generate_state(1)[0]))
        try:
            decoding = self.engine.start(images, plan=self.plan, generator=generator)
        except MixedSizes:  # no fixed size: refused (named by the dataset), never a list
            batch.update(decode_batch(columns, {self.name: feature}, size))
            return Done(DecodedBatch(self._stacked(batch), {}))
        return _DecodingBatch(self, decoding, DecodedBatch(batch, failures), images)

    def _default_png(self, feature: Image) -> bytes | FeatureError:
        """The fast image feature's default as PNG bytes (lossless: the
        engine decodes it to the default's pixels, then lays out, pads,
        normalizes and crops it as every image of the batch), made once; the
        error naming the fix for a default that is not an RGB image."""
        if self._png is None:
            default = feature.default
            if fusable_default(default):  # an RGB uint8 [3, H, W] (never _REQUIRED here: the record lacks it)
                from PIL import Image as PILImage

                out = io.BytesIO()
                PILImage.fromarray(default.permute(1, 2, 0).contiguous().numpy(), "RGB").save(out, "PNG")
                self._png = out.getvalue()
            else:
                shown = (f"{default.dtype} {'x'.join(map(str, default.shape))}"
                         if isinstance(default, torch.Tensor) else type(default).__name__)
                self._png = FeatureError(feature.key, f"the record lacks the image, and the feature's default "
                                                      f"({shown}) is not an RGB image for the batch: give "
                                                      f"Image(default=...) a uint8 tensor [3, H, W], or read "
                                                      f"without batch_size")
        return self._png

    def _rest(self, pixels: torch.Tensor) -> Any:
        """The transforms after the fused head, per image (torch's global RNG)."""
        from torchvision import tv_tensors
        from torchvision.transforms import v2

        rest = v2.Compose(self.rest)
        layout = self.engine.options.layout if self.engine is not None else "NCHW"
        nchw = pixels if layout == "NCHW" else pixels.permute(0, 3, 1, 2)
        out = [rest(tv_tensors.Image(image)) for image in nchw]
        shapes = _shapes(out)
        if None in shapes or len(set(shapes)) != 1:
            name = str(self.name)
            raise SizeMismatch(name, self.spec[name].key, shapes, f"end the transform with {_RESIZE_HINT}")
        return torch.stack([o.as_subclass(torch.Tensor) for o in out])

    def finish(self, batch: Any) -> Any:
        """The dataset's transform on a decoded batch, if it takes batches."""
        out = self.transform(batch) if self.transform is not None and not self.per_record else batch
        return batch_memory().finish(out)

    def _stacked(self, batch: dict) -> dict:
        """``batch``, checked: every image and mask feature is one tensor."""
        for name, feature in self.spec.items():
            if feature.stacks and isinstance(batch.get(name), list):
                raise SizeMismatch(name, feature.key, _shapes(batch[name]), self.hint)
        return batch

    def _per_record(self, decoded: dict, size: int) -> DecodedBatch:
        """Each record (``decoded``: as the per-sample path decodes it) through
        the transform, then collated: images and masks stack (all one size, or
        :class:`SizeMismatch`); what the batch held as a list (boxes, labels
        of varying count) stays a list of the transformed values; the rest
        stacks."""
        return DecodedBatch(self._collated(decoded, size), {})

    def _collated(self, decoded: dict, size: int) -> Any:
        records = [{k: v[i] for k, v in decoded.items()} for i in range(size)]
        out = [transform_objects(self.transform, r, f"record {i} of a batch") for i, r in enumerate(records)] \
            if self.transform else records
        if not all(isinstance(o, dict) and o.keys() == decoded.keys() for o in out):
            return default_collate(out)
        collated = {}
        for key, column in decoded.items():
            values = [o[key] for o in out]
            feature = self.spec[key]
            if feature.stacks:
                shapes = _shapes(values)
                if None in shapes or len(set(shapes)) != 1:
                    raise SizeMismatch(key, feature.key, shapes, self.hint)
            stack = feature.stacks or isinstance(column, torch.Tensor)
            collated[key] = default_collate(values) if stack else values
        return collated


class _DecodingBatch(Pending[DecodedBatch]):
    """A batch whose images decode on the engine's threads: ``partial`` holds
    the other features and the images that were refused before decoding."""

    def __init__(self, owner: ImageBatches, images: Pending[DecodedImages], partial: DecodedBatch,
                 encoded: list[bytes]) -> None:
        self.owner, self.images, self.partial, self.encoded = owner, images, partial, encoded

    def result(self) -> DecodedBatch:
        owner, (batch, failures) = self.owner, self.partial
        name = str(owner.name)
        key = owner.spec[name].key
        pixels, sizes, errors = self.images.result()
        for i, e in errors.items():
            failures.setdefault(i, FeatureError(key, f"cannot decode image ({len(self.encoded[i])} "
                                                     f"bytes): {type(e).__name__}: {e}"))
        batch[name] = pixels
        if sizes is not None:
            batch[f"{name}_size"] = sizes
        if owner.rest:
            batch[name] = owner._rest(pixels)
        return DecodedBatch(batch, failures)


def drop_rows(batch: Any, bad: set[int], size: int) -> Any:
    """``batch`` without the rows ``bad`` (tensors [B, ...] and lists of B)."""
    keep = [i for i in range(size) if i not in bad]
    if isinstance(batch, dict):
        return {k: drop_rows(v, bad, size) for k, v in batch.items()}
    if isinstance(batch, torch.Tensor) and batch.dim() and batch.shape[0] == size:
        return batch[torch.tensor(keep, dtype=torch.long)]
    if isinstance(batch, list) and len(batch) == size:
        return [batch[i] for i in keep]
    return batch
