"""Encoded images that reach a transform undecoded.

Read without ``features=`` (or with a ``Bytes()`` / TF string feature for
the image), an item holds the image's JPEG or PNG bytes. torchvision's
transforms pass bytes through unchanged, so the images would reach the
model as bytes, or fail far from the cause; a transform from
``torchvision.transforms`` is refused such an item, and any other callable
that fails on one gets a note saying which key holds encoded images and the
spec that decodes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfrecord_torch.features.items import as_item
from tfrecord_torch.records.sniff import foreign_format

__all__ = ["apply_transform"]


def apply_transform(transform: Callable | None, item: Any, path: str, offset: int, record: int) -> Any:
    """``transform(item)`` as an :class:`~tfrecord_torch.features.items.Item`
    (if a dict), refused (TypeError) for a torchvision transform when
    ``item`` holds encoded images; ``path``, ``offset`` and ``record``
    locate the record."""
    at = (path, offset, record)
    if transform is None:
        return as_item(item, at)
    if type(transform).__module__.startswith("torchvision.transforms"):
        found = _encoded_image(item)
        if found is not None:
            raise TypeError(f"{path}: record {record} at byte offset {offset}: {_explain(*found, transform)}")
        return as_item(transform(item), at)
    try:
        return as_item(transform(item), at)
    except Exception as e:
        found = _encoded_image(item)
        if found is not None and hasattr(e, "add_note"):  # Python >= 3.11; kept in a worker's traceback
            e.add_note(f"{path}: record {record} at byte offset {offset}: {_explain(*found, transform)}")
        raise


def _encoded_image(item: Any) -> tuple[str, str] | None:
    """The first key of ``item`` holding encoded image bytes (as one value,
    or a list of one: a record read without a spec), and their format."""
    if not isinstance(item, dict):
        return None
    for key, value in item.items():
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, bytes) and len(value) > 8:
            what = foreign_format(value[:512])
            if what is not None and what.endswith(" image"):
                return str(key), what
    return None


def _explain(key: str, what: str, transform: Callable) -> str:
    return (f"feature {key!r} holds encoded {what.split()[1]} images, not decoded, and {type(transform).__name__} passes bytes through unchanged; decode them "
            f"with features={{{key!r}: Image(), ...}} (in a TF feature description, Image() in place of "
            f"FixedLenFeature([], tf.string); {{{key!r}: Image()}} also replaces Bytes() or 'byte')")
