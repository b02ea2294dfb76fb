"""Encoded images that reach a transform undecoded.

Read without ``features=`` (or with a ``Bytes()`` / TF string feature for
the image), an item holds the image's JPEG or PNG bytes. torchvision's
transforms pass bytes through unchanged, so the images would reach the
model as bytes, or fail far from the cause; a transform from
``torchvision.transforms`` is refused such an item, and any other callable
that fails on one gets a note saying which key holds encoded images and the
spec that decodes them.

What is checked is what reaches torchvision's own first transform: a
``Compose`` that starts with the user's own callables (a decoder of their
own) runs those first, and the check looks at what they return. Every
transform of a detection item is also checked for per-object values left
behind when boxes were dropped (:mod:`~tfrecord_torch.features.images.objects`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from tfrecord_torch.features.images.objects import transform_objects
from tfrecord_torch.features.items import as_item
from tfrecord_torch.records.sniff import foreign_format

__all__ = ["apply_transform"]


def apply_transform(transform: Callable | None, item: Any, path: str, offset: int, record: int) -> Any:
    """``transform(item)`` as an :class:`~tfrecord_torch.features.items.Item`
    (if a dict), refused (TypeError) when encoded images would reach a
    torchvision transform; ``path``, ``offset`` and ``record`` locate the
    record."""
    at = (path, offset, record)
    if transform is None:
        return as_item(item, at)
    where = f"{path}: record {record} at byte offset {offset}"
    if _torchvision(transform):
        return as_item(transform_objects(lambda x: _run_checked(transform, x, where), item, where), at)
    try:
        return as_item(transform_objects(transform, item, where), at)
    except Exception as e:
        found = _encoded_image(item)
        if found is not None and hasattr(e, "add_note"):  # Python >= 3.11; kept in a worker's traceback
            e.add_note(f"{where}: {_explain(*found, transform)}")
        raise


def _torchvision(transform: Any) -> bool:
    return type(transform).__module__.startswith("torchvision.transforms")


def _run_checked(transform: Callable, item: Any, where: str) -> Any:
    """``transform(item)``, with the item refused where torchvision's own
    first transform would get encoded images: the leading steps of a
    ``Compose`` that are the user's own run first (a ``Compose`` of one input
    applies its steps in turn, so running them here is the same call)."""
    steps = _leading_steps(transform)
    value = item
    for step in steps.own:
        value = step(value)
    found = _encoded_image(value)
    if found is not None:
        raise TypeError(f"{where}: {_explain(*found, steps.first)}")
    for step in steps.rest:
        value = step(value)
    return value


class _Steps(NamedTuple):
    own: list  # the user's callables that run before torchvision's first transform
    first: Any  # torchvision's first transform (for the message)
    rest: list  # that transform and everything after it


def _leading_steps(transform: Any) -> _Steps:
    """``transform`` split at torchvision's first own transform, looking into
    ``Compose``s (torchvision's, v1 or v2) whose steps run in order."""
    if type(transform).__name__ != "Compose" or not _torchvision(transform):
        return _Steps([], transform, [transform])
    steps = list(transform.transforms)
    for i, step in enumerate(steps):
        if _torchvision(step):
            inner = _leading_steps(step)
            return _Steps(steps[:i] + inner.own, inner.first, inner.rest + steps[i + 1:])
    return _Steps(steps, transform, [])


def _encoded_image(item: Any) -> tuple[str, str, bool] | None:
    """The first key of ``item`` holding encoded image bytes (one value, or
    a list of them: a record read without a spec), their format, and
    whether they came as a list of several values."""
    if not isinstance(item, dict):
        return None
    for key, value in item.items():
        several = isinstance(value, list) and len(value) > 1
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, bytes) and len(value) > 8:
            what = foreign_format(value[:512])
            if what is not None and what.endswith(" image"):
                return str(key), what, several
    return None


def _explain(key: str, what: str, several: bool, transform: Callable) -> str:
    if "mask" in key.lower():
        fix = (f"features={{{key!r}: InstanceMasks(), ...}} for one mask per object (tv_tensors.Mask "
               f"[N, H, W]; presets.object_detection(masks=True) reads the OD API's), "
               f"{{{key!r}: Mask()}} for one segmentation mask")
    elif several:
        fix = (f"features={{{key!r}: Image(), ...}} decodes one image, and this key holds several in a record: "
               f"read them with Bytes(many=True) and decode each in your transform")
    else:
        fix = (f"features={{{key!r}: Image(), ...}} (in a TF feature description, Image() in place of "
               f"FixedLenFeature([], tf.string); {{{key!r}: Image()}} also replaces Bytes() or 'byte')")
    return (f"feature {key!r} holds encoded {what.split()[1]} images, not decoded, and "
            f"{type(transform).__name__} passes bytes through unchanged; decode them with {fix}")
