"""The dict each record decodes to, and what DataLoader's default collate
says when its values cannot be stacked.

Items are :class:`Item`, a dict subclass that behaves as a dict (equality,
``isinstance(item, dict)``, pickling, torchvision v2 transforms through
torch's pytree) and remembers which record it came from. It is registered
in torch's ``default_collate_fn_map``, so ``DataLoader(ds, batch_size=32)``
collates it key by key as default_collate does a dict (the batch is a plain
dict), except that values of different sizes -- images of several sizes,
variable-length features, box lists -- raise an error naming the key, the
sizes met and their records, and the fix (``pad_collate``, a resize,
``detection_collate``) instead of torch's "stack expects each tensor to be
equal size". A ``collate_fn`` of one's own gets the items as dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils.data._utils.collate import collate, default_collate_fn_map

__all__ = ["Item", "as_batch_head", "as_item"]


class Item(dict):
    """A decoded record: a dict that knows where it came from (:attr:`where`)."""

    __slots__ = ("at", "locate", "stacking")
    at: tuple | None  # (path, byte offset, record number), or None
    locate: Any  # for the first item of a map-style batch: the location of the batch's k-th item
    stacking: Any  # the StackAhead whose slots its large tensors may be in (data/stackahead.py)

    def __reduce__(self):
        return (_rebuild, (dict(self), getattr(self, "at", None)))

    @property
    def where(self) -> str:
        """"path: record r at byte offset o", or "record unknown"."""
        at = getattr(self, "at", None)
        return "record unknown" if at is None else f"{at[0]}: record {at[2]} at byte offset {at[1]}"


def _rebuild(values: dict, at: tuple | None) -> Item:
    item = Item(values)
    item.at = at
    return item


def as_item(value: Any, at: tuple) -> Any:
    """``value`` as an :class:`Item` from ``at`` = (path, offset, record), if
    it is a plain dict; else unchanged."""
    if type(value) is not dict:
        return value
    item = Item(value)
    item.at = at
    return item


def as_batch_head(value: dict, locate: Any) -> Item:
    """The first item of a batch of plain dicts as an :class:`Item` that can
    locate every item of the batch (``locate(k)``: path, offset, record), so
    default_collate of the batch names the records of values that do not
    stack, at one Item a batch."""
    item = Item(value)
    item.at, item.locate = None, locate
    return item


def collate_items(batch: list, *, collate_fn_map: dict | None = None, stack: Callable | None = None) -> dict:
    """default_collate of a batch of items: a dict of each key's collated values.

    ``stack(key, values)``, if given, is tried first for each key; where it
    gives None, the values are collated as default_collate does.
    """
    out = {}
    for key in batch[0]:
        values = [item[key] for item in batch]
        if stack is not None:
            stacked = stack(key, values)
            if stacked is not None:
                out[key] = stacked
                continue
        try:
            out[key] = collate(values, collate_fn_map=collate_fn_map)
        except RuntimeError as e:
            message = unequal_sizes(key, values, batch)
            if message is None:
                raise
            raise RuntimeError(message) from e
    return out


def unequal_sizes(key: str, values: list, batch: list) -> str | None:
    """The message for ``key``'s values that do not stack (None if they are
    not tensors or lists of different sizes)."""
    if all(isinstance(v, torch.Tensor) for v in values):
        sizes = [tuple(v.shape) for v in values]
    elif all(isinstance(v, (list, tuple)) for v in values):
        sizes = [(len(v),) for v in values]
    else:
        return None
    if len(set(sizes)) < 2:
        return None
    first = sizes[0]
    odd = next(i for i, s in enumerate(sizes) if s != first)
    seen = f"{list(first)} ({_where(batch, 0)}) and {list(sizes[odd])} ({_where(batch, odd)})"
    message = f"default_collate cannot stack feature {key!r}: its values differ in size in this batch, {seen}; "
    if type(values[0]).__name__ == "BoundingBoxes":
        return message + ("each image has its own number of boxes: batch them with "
                          "DataLoader(..., collate_fn=detection_collate) (a list of images and of targets)")
    if len(first) >= 3 or type(values[0]).__name__ in ("Image", "Mask"):
        return message + ("images of different sizes: pad them with DataLoader(..., collate_fn=pad_collate) "
                          f"(to the largest, with {key}_size and {key}_mask), or resize them to one size "
                          "(transform=v2.Resize((H, W)), or ImageBatching(size=(H, W)) in batch mode)")
    return message + ("variable-length values: pad them with DataLoader(..., collate_fn=pad_collate) (to the "
                      f"longest, with {key}_length; lists of bytes stay lists), or give the feature a fixed shape")


def _where(batch: list, k: int) -> str:
    item = batch[k]
    if isinstance(item, Item) and getattr(item, "at", None) is not None:
        return item.where
    locate = getattr(batch[0], "locate", None)
    if locate is None:
        return "record unknown"
    path, offset, record = locate(k)
    return f"{path}: record {record} at byte offset {offset}"


def _flatten(item: Item) -> tuple[list, tuple]:
    return list(item.values()), (list(item), getattr(item, "at", None))


def _unflatten(values: Any, context: tuple) -> Item:
    keys, at = context
    item = Item(zip(keys, values))
    item.at = at
    return item


# torchvision v2 transforms walk containers with torch's pytree, which takes
# an unregistered dict subclass for a leaf (and would leave it untouched).
pytree.register_pytree_node(Item, _flatten, _unflatten, serialized_type_name="tfrecord_torch.Item")
default_collate_fn_map[Item] = collate_items
