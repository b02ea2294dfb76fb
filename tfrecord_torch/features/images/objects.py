"""Which values of a detection item are per-object, and keeping them aligned
with the boxes when a transform drops some.

The rule: a detection item (``presets.object_detection()``'s) holds one
``boxes`` (``tv_tensors.BoundingBoxes`` [N, 4]) and, under the names in
:data:`PER_OBJECT`, values with one entry per box, in the boxes' order:
``labels``, ``masks`` ([N, H, W]), ``text``, ``is_crowd``, ``area``,
``difficult``, ``group_of``, ``weight``. torchvision's
``v2.SanitizeBoundingBoxes`` (needed after ``RandomIoUCrop``) drops boxes and,
with them, every ``tv_tensors.Mask`` of N masks and the tensors its
``labels_getter`` returns -- by default the ``labels`` alone.
``labels_getter=ObjectLabels()`` returns every per-object tensor, so
``is_crowd``, ``area`` and the rest follow too.

A list of str (``text``) cannot follow: torchvision indexes tensors only.
So that no per-object value is ever silently paired with another object's
box, :func:`check_objects` runs after each transform of a detection item and
raises when the box count changed but a per-object value kept the old count;
the message says how to make it follow (``labels_getter=ObjectLabels()``) or,
for ``text``, to read without it (the labels name the classes).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.features.specs import Feature

__all__ = ["PER_OBJECT", "ObjectLabels", "PerObject", "check_objects", "object_counts", "transform_objects"]

PER_OBJECT = ("labels", "masks", "text", "is_crowd", "area", "difficult", "group_of", "weight")
"""The output names of a detection item's per-object values (besides ``boxes``)."""

_TENSORS = tuple(k for k in PER_OBJECT if k not in ("masks", "text"))  # what labels_getter may return


class ObjectLabels:
    """A ``labels_getter`` for ``v2.SanitizeBoundingBoxes``: the item's
    per-object tensors (``labels``, ``is_crowd``, ``area``, ... of
    :data:`PER_OBJECT`; masks are filtered by torchvision itself), so all of
    them drop with their boxes. A class, not a lambda, so that DataLoader
    workers started by spawn can take it.

    Args:
        keys: the names to return, those the item holds (default: every
            per-object tensor name).
    """

    def __init__(self, keys: Sequence[str] = _TENSORS) -> None:
        if isinstance(keys, str):
            raise ValueError(f"keys must be a sequence of names, got the string {keys!r}")
        self.keys = tuple(keys)

    def __call__(self, inputs: Any) -> tuple[torch.Tensor, ...]:
        item = inputs[1] if isinstance(inputs, (tuple, list)) else inputs
        if not isinstance(item, dict):
            raise ValueError(f"ObjectLabels takes a detection item (a dict), got {type(item).__name__}")
        out = []
        for key in self.keys:
            value = item.get(key)
            if value is None:
                continue
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"ObjectLabels: {key!r} holds a {type(value).__name__}, not a tensor, and "
                                 f"SanitizeBoundingBoxes indexes tensors only; {_LIST_FIX}")
            out.append(value)
        return tuple(out)

    def __repr__(self) -> str:
        return f"ObjectLabels({list(self.keys)!r})"


_LIST_FIX = ("a list of str (text) cannot follow the boxes: read presets.object_detection(text=False) and "
             "name the classes from the labels")


class PerObject(Feature):
    """A per-object list read by ``feature`` (``Int64``/``Float`` with
    ``shape=None``, ``Text(many=True)``) that must hold one value per box:
    a record whose list is longer, shorter or missing while it has boxes is a
    FeatureError naming the key, not values paired with the wrong boxes.

    Args:
        feature: the feature that reads the list.
        count: the key with one value per box (the boxes' ``xmin``).
        fix: what to do about a record that does not fit, for the message.
    """

    def __init__(self, feature: Feature, *, count: str = "image/object/bbox/xmin", fix: str = "") -> None:
        super().__init__(feature.key, default=feature.default)
        self.feature, self.count, self.fix = feature, count, fix
        self.kind = feature.kind

    def bind(self, name: str) -> Feature:
        bound = copy.copy(self)
        bound.feature = self.feature.bind(name)
        bound.key = bound.feature.key
        return bound

    def decode(self, record: dict) -> Any:
        value = self.feature.decode(record)
        self._check(record, value)
        return value

    def decode_column(self, column: Any, records: Any) -> Any:
        values = self.feature.decode_column(column, records)
        for record, value in zip(records(), values):
            self._check(record, value)
        return values

    def _check(self, record: dict, value: Any) -> None:
        boxes = record.get(self.count)
        n = 0 if boxes is None else len(boxes)
        got = 0 if value is None else len(value)
        if got != n:
            held = f"holds {got} values" if self.key in record else "is missing"
            raise FeatureError(self.key, f"{held} but the record has {n} boxes ({self.count!r}); each object "
                                         f"needs one value, in the boxes' order{self.fix}")

    def __repr__(self) -> str:
        return f"PerObject({self.feature!r}, count={self.count!r})"


class ObjectCounts(NamedTuple):
    """A detection item's box count and the names of its per-object values."""

    boxes: int
    keys: tuple[str, ...]


def object_counts(item: Any) -> ObjectCounts | None:
    """The box count and per-object names of ``item`` before a transform (None
    when it is not a dict with ``boxes``, or has no boxes: then nothing can drop)."""
    if not isinstance(item, dict):
        return None
    boxes = item.get("boxes")
    if not isinstance(boxes, torch.Tensor) or boxes.ndim != 2 or not len(boxes):
        return None
    n = len(boxes)
    keys = tuple(k for k in PER_OBJECT if _length(item.get(k)) == n)
    return ObjectCounts(n, keys) if keys else None


def check_objects(before: ObjectCounts | None, out: Any, where: str) -> None:
    """Raise ValueError if ``out`` (a transform's result) has fewer or more
    boxes than ``before`` counted, but a per-object value kept the old count."""
    if before is None or not isinstance(out, dict) or not isinstance(out.get("boxes"), torch.Tensor):
        return
    n = len(out["boxes"])
    if n == before.boxes:
        return
    stale = [k for k in before.keys if _length(out.get(k)) == before.boxes]
    if stale:
        fixes = []
        if any(not isinstance(out[k], list) for k in stale):
            fixes.append("name the tensors in SanitizeBoundingBoxes(labels_getter=tfrecord_torch.ObjectLabels()) "
                         "so they drop with their boxes")
        if any(isinstance(out[k], list) for k in stale):
            fixes.append(_LIST_FIX)
        raise ValueError(f"{where}: the transform left {n} of {before.boxes} boxes but "
                         f"{', '.join(map(repr, stale))} still hold {before.boxes} values, which would pair with "
                         f"the wrong objects; {'; '.join(fixes)}")


def transform_objects(transform: Callable, item: Any, where: str) -> Any:
    """``transform(item)``, checked by :func:`check_objects`."""
    before = object_counts(item)
    out = transform(item)
    check_objects(before, out, where)
    return out


def _length(value: Any) -> int | None:
    if isinstance(value, list):
        return len(value)
    if isinstance(value, torch.Tensor) and value.ndim >= 1:
        return value.shape[0]
    return None
