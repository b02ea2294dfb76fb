"""Batch mode with images: the batch image engine wired to a dataset's spec,
transform and error policy.

In batch mode a torchvision v2 ``transform=`` is applied to each record, not
to the batch (each image gets its own random crop and flip); a plain
callable still receives the whole batch. The fast path takes a spec with
exactly one RGB :class:`~tfrecord_torch.Image` (besides any number of
non-spatial features such as labels): its images are decoded on the engine's
threads into one buffer, a fusable head of the transform done on the way.
Specs with masks, boxes or several images, and ``images=False``, decode and
transform each record as the per-sample path does, then stack.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.crop import CroppedImage, CropPlan, plan_transform
from tfrecord_torch.features.engine import DecodeEngine, ImageBatching, MixedSizes
from tfrecord_torch.features.image_specs import Image
from tfrecord_torch.features.specs import decode_batch

__all__ = ["ImageBatches", "drop_rows", "fuse_per_sample", "is_v2_transform"]


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


def fuse_per_sample(spec: Any, transform: Callable | None, options: ImageBatching | None
                    ) -> tuple[Any, Callable | None]:
    """The (spec, transform) the per-sample path decodes with: when a v2
    ``transform`` starts with a fusable head (RandomResizedCrop or Resize((h, w)),
    + flip) and the spec holds one RGB Image and no other spatial feature,
    the image decodes through :class:`CroppedImage` and the transform keeps
    what follows the head -- the same pixels and RNG draws as unfused.
    ``images=False`` or ``ImageBatching(fused=False)`` keep both as given."""
    if options is None or not options.fused or not isinstance(spec, dict) or not is_v2_transform(transform):
        return spec, transform
    name = _fast_image(spec)
    plan, rest = plan_transform(transform) if name is not None else (None, [])
    if name is None or plan is None:
        return spec, transform
    from torchvision.transforms import v2

    fused = {n: CroppedImage(f, plan) if n == name else f for n, f in spec.items()}
    return fused, (v2.Compose(rest) if rest else None)


class ImageBatches:
    """Decodes parsed batches for one iterator (owns the engine's threads).

    Args:
        spec: the dataset's bound spec.
        transform: the dataset's transform (v2: per record; else per batch).
        options: the engine's options, or None to decode as the per-sample
            path does (then stack).
        seed: seeds each batch's crop generator with the batch's number.
    """

    def __init__(self, spec: dict, transform: Callable | None, options: ImageBatching | None,
                 seed: tuple[int, ...]) -> None:
        self.spec, self.seed = spec, seed
        self.per_record = is_v2_transform(transform)
        self.transform = transform
        self.name = _fast_image(spec) if options is not None else None
        self.plan: CropPlan | None = None
        self.rest: list = []
        if self.name is not None and self.per_record:
            self.plan, self.rest = plan_transform(transform) if options is not None and options.fused \
                else (None, [transform])
            if self.plan is None:
                self.name = None  # an unfused per-image transform needs each image on its own
        self.engine = DecodeEngine(options) if self.name is not None and options is not None else None

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()

    def decode(self, columns: dict, size: int, number: int) -> tuple[dict, dict[int, FeatureError]]:
        """Decode batch ``number`` (its parsed ``columns``, ``size`` records).

        Returns:
            (batch, failures): failures maps a record's position in the batch
            to the FeatureError of its image; their rows are still in ``batch``
            (zero-filled) for the caller to drop or refuse before :meth:`finish`.
        """
        return self.begin(columns, size, number)()

    def begin(self, columns: dict, size: int, number: int) -> Callable[[], tuple[dict, dict[int, FeatureError]]]:
        """:meth:`decode`, started: the images decode on the engine's threads
        while the caller goes on; call the result for (batch, failures)."""
        if self.engine is None or self.name is None:
            batch = decode_batch(columns, self.spec, size)
            done: tuple[dict, dict[int, FeatureError]] = \
                (self._per_record(batch, size) if self.per_record else batch), {}
            return lambda: done
        feature = self.spec[self.name]
        others = {n: f for n, f in self.spec.items() if n != self.name}
        batch = decode_batch(columns, others, size) if others else {}
        column = columns.get(feature.key, [None] * size)
        failures: dict[int, FeatureError] = {}
        images = []
        for i, value in enumerate(column):
            if value is None or len(value) != 1:
                failures[i] = FeatureError(feature.key, "required feature is missing" if value is None
                                           else f"holds {len(value)} images, expected 1")
                images.append(b"")
            else:
                images.append(value[0])
        generator = torch.Generator().manual_seed(
            int(np.random.SeedSequence([*self.seed, number]).generate_state(1)[0]))
        try:
            pending = self.engine.start(images, plan=self.plan, generator=generator)
        except MixedSizes:  # no fixed size: a list, as the per-sample decode gives
            batch.update(decode_batch(columns, {self.name: feature}, size))
            return lambda: (batch, {})
        name = self.name

        def finish() -> tuple[dict, dict[int, FeatureError]]:
            pixels, sizes, errors = pending()
            for i, e in errors.items():
                failures.setdefault(i, FeatureError(feature.key, f"cannot decode image ({len(images[i])} "
                                                                 f"bytes): {type(e).__name__}: {e}"))
            batch[name] = pixels
            if sizes is not None:
                batch[f"{name}_size"] = sizes
            if self.rest:
                batch[name] = self._rest(pixels)
            return batch, failures
        return finish

    def _rest(self, pixels: torch.Tensor) -> Any:
        """The transforms after the fused head, per image (torch's global RNG)."""
        from torchvision import tv_tensors
        from torchvision.transforms import v2

        rest = v2.Compose(self.rest)
        layout = self.engine.options.layout if self.engine is not None else "NCHW"
        nchw = pixels if layout == "NCHW" else pixels.permute(0, 3, 1, 2)
        out = [rest(tv_tensors.Image(image)) for image in nchw]
        if all(isinstance(o, torch.Tensor) for o in out) and len({tuple(o.shape) for o in out}) == 1:
            return torch.stack([o.as_subclass(torch.Tensor) for o in out])
        return out

    def finish(self, batch: Any) -> Any:
        """The dataset's transform on a decoded batch, if it takes batches."""
        return self.transform(batch) if self.transform is not None and not self.per_record else batch

    def _per_record(self, batch: dict, size: int) -> Any:
        """Each record's features through the transform, then collated: what
        the batch held as a list (boxes, labels of varying count) stays a list
        of the transformed values; images and masks stack once the transform
        made them one size; the rest stacks."""
        if not self.transform:
            return batch
        records = [{k: v[i] for k, v in batch.items()} for i in range(size)]
        out = [self.transform(r) for r in records]
        if not all(isinstance(o, dict) and o.keys() == batch.keys() for o in out):
            return default_collate(out)
        collated = {}
        for key in batch:
            values = [o[key] for o in out]
            feature = self.spec.get(key)
            stack = not isinstance(batch[key], list) or (
                feature is not None and feature.stacks and all(isinstance(v, torch.Tensor) for v in values)
                and len({tuple(v.shape) for v in values}) == 1)
            collated[key] = default_collate(values) if stack else values
        return collated


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
