"""What a bytes value holds, told from its first bytes: the sniffers that
``inspect``, ``head`` and ``preview`` share.

A sniffer is a function ``bytes -> Content | None``; :data:`BYTES_SNIFFERS`
lists them in the order they are tried, and the first that recognises a value
names it. A new kind of payload (a serialized tensor, ...) is one function and
one line in that list: ``inspect`` then reports it and prints its ``spec``,
``head`` names it, with nothing else to change.
"""

from __future__ import annotations

from collections.abc import Callable

from tfrecord_torch.example.schema import Content
from tfrecord_torch.example.tensorproto import DTYPES, TensorProto, looks_like_tensorproto
from tfrecord_torch.features.images.limits import image_format, read_header

__all__ = ["BYTES_SNIFFERS", "sniff", "sniff_image", "sniff_tensor"]

_IMAGE_NAMES = {"jpeg": "JPEG", "png": "PNG", "gif": "GIF", "webp": "WebP"}


def sniff_image(value: bytes) -> Content | None:
    """A JPEG, PNG, GIF or WebP image by its magic bytes, with its size from
    the header (None when the header is cut short or corrupt: the image still
    counts, since its decoder names the fault)."""
    fmt = image_format(value[:16])
    if fmt is None:
        return None
    try:
        header = read_header(value)
        size: tuple[int, int] | None = (header.width, header.height)
    except (ValueError, IndexError):  # a corrupt header: decoding will say so
        size = None
    return Content(_IMAGE_NAMES[fmt], "images", "Image()", size, "tf.io.decode_image")


def sniff_tensor(value: bytes) -> Content | None:
    """A serialized tensor (``tf.io.serialize_tensor``'s TensorProto), named by its
    TensorFlow dtype; ``SerializedTensor()`` reads it, ``tf.io.parse_tensor`` in TF."""
    if not looks_like_tensorproto(value):
        return None
    name = DTYPES[TensorProto.FromString(value).dtype].name
    name = _TF_NAMES.get(name, name)
    return Content(f"serialized {name}", "tensors", "SerializedTensor()",
                   tf_hint=f"tf.io.parse_tensor(x, out_type=tf.{name})")


# TensorFlow's DataTypeString names that differ from its Python dtype names.
_TF_NAMES = {"float": "float32", "double": "float64", "half": "float16"}

BYTES_SNIFFERS: list[Callable[[bytes], Content | None]] = [sniff_image, sniff_tensor]


def sniff(value: bytes) -> Content | None:
    """What ``value`` holds, by the first of :data:`BYTES_SNIFFERS` that knows, else None."""
    for sniffer in BYTES_SNIFFERS:
        found = sniffer(value)
        if found is not None:
            return found
    return None
