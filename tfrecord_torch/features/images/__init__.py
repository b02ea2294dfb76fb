"""Images: decoding, the image-like features (Image, Mask, Boxes) and the batch image engine.

Like ``torchvision.io``, a namespace of its own::

    from tfrecord_torch.features.images import Image, decode_image

The names are exported lazily: importing one module of the subpackage does
not import the others (the generic :mod:`~tfrecord_torch.features.specs`
imports :mod:`.decode`, and :mod:`.specs` here builds on it).

Modules: :mod:`.decode` (encoded bytes to [C, H, W], as TensorFlow decodes),
:mod:`.limits` (headers and pixel limits, read before decoding), :mod:`.jpeg`
(libjpeg-turbo: whole, crop-window and whole-batch, with the compiled
``_jpegcrop`` where it was built), :mod:`.pillow` and :mod:`.channels`
(Pillow decoding and TensorFlow's channel arithmetic), :mod:`.specs`,
:mod:`.masks`, :mod:`.instances` and :mod:`.boxes` (the features), :mod:`.objects`
(a detection item's per-object values kept with their boxes), :mod:`.wrap` (torchvision's
tv_tensors), :mod:`.crop` (a transform's fused crop/resize head) and
:mod:`.engine` (threads decoding a batch into one buffer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfrecord_torch._lazy import lazy_exports

_EXPORTS = {
    "Boxes": "tfrecord_torch.features.images.boxes",
    "FastDecoderUnavailable": "tfrecord_torch.features.images.jpeg",
    "Image": "tfrecord_torch.features.images.specs",
    "ImageBatching": "tfrecord_torch.features.images.engine",
    "InstanceMasks": "tfrecord_torch.features.images.instances",
    "Mask": "tfrecord_torch.features.images.masks",
    "ObjectLabels": "tfrecord_torch.features.images.objects",
    "RawImage": "tfrecord_torch.features.images.specs",
    "crop_decoding_available": "tfrecord_torch.features.images.jpeg",
    "decode_image": "tfrecord_torch.features.images.decode",
    "decode_jpeg": "tfrecord_torch.features.images.jpeg",
    "decode_mask": "tfrecord_torch.features.images.masks",
    "image_size": "tfrecord_torch.features.images.limits",
}

__all__ = ["Boxes", "FastDecoderUnavailable", "Image", "ImageBatching", "InstanceMasks", "Mask", "ObjectLabels",
           "RawImage", "crop_decoding_available", "decode_image", "decode_jpeg", "decode_mask", "image_size"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see
    from tfrecord_torch.features.images.boxes import Boxes
    from tfrecord_torch.features.images.decode import decode_image
    from tfrecord_torch.features.images.engine import ImageBatching
    from tfrecord_torch.features.images.instances import InstanceMasks
    from tfrecord_torch.features.images.jpeg import (
        FastDecoderUnavailable,
        crop_decoding_available,
        decode_jpeg,
    )
    from tfrecord_torch.features.images.limits import image_size
    from tfrecord_torch.features.images.masks import Mask, decode_mask
    from tfrecord_torch.features.images.objects import ObjectLabels
    from tfrecord_torch.features.images.specs import Image, RawImage
