"""torchvision's tv_tensors for decoded features, so v2 transforms know what each tensor is.

``transform=v2.Compose([v2.RandomResizedCrop(224), ...])`` crops an image,
its mask and its boxes alike only when they arrive as ``tv_tensors.Image``,
``Mask`` and ``BoundingBoxes``. In a process where TensorFlow was imported
before torchvision, importing torchvision may crash (see
:func:`~tfrecord_torch.features.images.decode.preload`): there the features give
plain tensors, and boxes a plain float tensor [N, 4] in XYXY pixels.
"""

from __future__ import annotations

import functools

import torch

from tfrecord_torch.features.images import decode as _images

__all__ = ["as_boxes", "as_image", "as_mask"]


def as_image(tensor: torch.Tensor) -> torch.Tensor:
    """``tv_tensors.Image`` of a tensor [..., C, H, W], or the tensor itself."""
    if not _images._torchvision_usable():  # looked up on the module: one switch for all features
        return tensor
    image = _image_class()
    if type(tensor) is torch.Tensor and tensor.ndim >= 3:
        # what Image() makes of such a tensor, without the conversions and checks it runs on
        # every image (several times as long as as_subclass)
        return tensor.as_subclass(image)
    return image(tensor)


@functools.cache
def _image_class() -> type:
    """``tv_tensors.Image``, imported once (an import statement per image costs a lookup)."""
    from torchvision import tv_tensors

    return tv_tensors.Image


def as_mask(tensor: torch.Tensor) -> torch.Tensor:
    """``tv_tensors.Mask`` of a tensor [H, W], or the tensor itself."""
    if not _images._torchvision_usable():  # looked up on the module: one switch for all features
        return tensor
    from torchvision import tv_tensors

    return tv_tensors.Mask(tensor)


def as_boxes(tensor: torch.Tensor, canvas_size: tuple[int, int]) -> torch.Tensor:
    """``tv_tensors.BoundingBoxes`` (XYXY, absolute pixels) of a float tensor
    [N, 4] on an image of ``canvas_size`` (H, W), or the tensor itself."""
    if not _images._torchvision_usable():  # looked up on the module: one switch for all features
        return tensor
    from torchvision import tv_tensors

    return tv_tensors.BoundingBoxes(tensor, format="XYXY", canvas_size=canvas_size)
