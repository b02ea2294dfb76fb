"""Collate functions for batches of decoded records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import default_collate

__all__ = ["detection_collate", "pad_collate"]


def pad_collate(batch: list, *, keys: Sequence[str] = ("image", "mask"), value: int = 0,
                mask_value: int = 255) -> Any:
    """Collate dicts whose images differ in size, like tf.data's padded_batch.

    Each tensor [C, H, W] under ``keys`` is padded at the bottom and right to
    the largest H and W in the batch with ``value``. For each such key ``k`` the
    batch also holds ``k + "_size"`` (int64 [B, 2]: original H, W) and
    ``k + "_mask"`` (bool [B, H, W], True on real pixels). Segmentation masks
    under ``keys`` (tensors [H, W], such as :class:`~tfrecord_torch.Mask`'s)
    are padded with ``mask_value`` instead -- 255 by default, the ignore index
    segmentation losses expect (``CrossEntropyLoss(ignore_index=255)``). Other
    keys use default_collate.

    Use with ``functools.partial(pad_collate, keys=(...), mask_value=...)``.
    """
    if not batch:
        return {}
    out = {}
    for key in batch[0]:
        values = [item[key] for item in batch]
        if key in keys and all(isinstance(v, torch.Tensor) and v.dim() == 2 for v in values):
            out[key] = _pad_masks(values, mask_value)
        elif key in keys:
            out.update(_pad(key, values, value))
        else:
            out[key] = default_collate(values)
    return out


def detection_collate(batch: list, *, image: str = "image") -> tuple[list, list[dict]]:
    """Collate detection samples into what torchvision's detection models take:
    a list of images and a list of per-image target dicts (``boxes``,
    ``labels`` and every other key), each image keeping its own box count.

    Returns:
        (images, targets): B tensors [C, H, W] and B dicts.
    """
    images = [item[image] for item in batch]
    targets = [{k: v for k, v in item.items() if k != image} for item in batch]
    return images, targets


def _pad_masks(masks: list, value: int) -> torch.Tensor:
    h = max(m.shape[0] for m in masks)
    w = max(m.shape[1] for m in masks)
    padded = torch.full((len(masks), h, w), value, dtype=masks[0].dtype)
    for i, m in enumerate(masks):
        padded[i, :m.shape[0], :m.shape[1]] = m
    return padded


def _pad(key: str, images: list, value: int) -> dict:
    if any(img.dim() != 3 for img in images) or len({img.shape[0] for img in images}) != 1:
        raise ValueError(f"pad_collate: {key!r} must hold tensors [C, H, W] with one C, got "
                         f"shapes {sorted({tuple(i.shape) for i in images})}")
    h = max(img.shape[1] for img in images)
    w = max(img.shape[2] for img in images)
    c = images[0].shape[0]
    padded = images[0].new_full((len(images), c, h, w), value)
    mask = torch.zeros((len(images), h, w), dtype=torch.bool)
    for i, img in enumerate(images):
        padded[i, :, :img.shape[1], :img.shape[2]] = img
        mask[i, :img.shape[1], :img.shape[2]] = True
    sizes = torch.tensor([[img.shape[1], img.shape[2]] for img in images], dtype=torch.int64)
    return {key: padded, f"{key}_size": sizes, f"{key}_mask": mask}
