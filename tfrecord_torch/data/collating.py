"""default_collate of items, as DataLoader(ds, batch_size=N) runs it.

In the main process (``num_workers=0``) it is
:func:`~tfrecord_torch.features.items.collate_items`. In a DataLoader
worker, each key's values are stacked into a shared-memory segment the
worker uses again once the main process let go of the batch
(:class:`~tfrecord_torch.data.transport.stacking.Stacker`), where torch
would make a new segment per tensor per batch; the main process receives the
same plain tensors either way. Registered in torch's
``default_collate_fn_map`` for :class:`~tfrecord_torch.features.items.Item`
when the datasets are imported; a ``collate_fn`` of one's own is not
affected unless it calls default_collate itself.
"""

from __future__ import annotations

import torch.utils.data
from torch.utils.data._utils.collate import default_collate_fn_map

from tfrecord_torch.data.transport.shipped import inline_small
from tfrecord_torch.data.transport.stacking import Stacker
from tfrecord_torch.features.items import Item, collate_items

__all__ = ["collate_worker_items"]

_STACKER = Stacker()


def collate_worker_items(batch: list, *, collate_fn_map: dict | None = None) -> dict:
    """default_collate of a batch of items; in a DataLoader worker, over
    reused shared memory."""
    if torch.utils.data.get_worker_info() is None:
        return collate_items(batch, collate_fn_map=collate_fn_map)
    return inline_small(collate_items(batch, collate_fn_map=collate_fn_map, stack=_STACKER.stack))


default_collate_fn_map[Item] = collate_worker_items
