"""Per-sample batches of a DataLoader worker, stacked into reused shared memory.

torch's default_collate, in a DataLoader worker, stacks each tensor of a
batch into a fresh shared-memory segment: for 64 RGB images of 256x256 the
worker page-faults 12.6 MB of new pages in, opens and maps a segment, passes
its file descriptor to the main process (a socket round trip per tensor per
batch), and the main process maps it and later unmaps it -- about as much
CPU time again as the copy itself. :class:`Stacker` stacks a key's values
into a segment of a :class:`~.shipped.SharedBuffers` pool of that key's own
instead, sent as a :class:`~.shipped.Shipped` tensor (the segment once, then
its key and where the batch lies in it), written again only after the main
process let go of the batch; small values (labels) travel by value
(:class:`~.shipped.Inline`). What arrives is what default_collate gives: a
plain tensor of the same shape, dtype, strides and values.

Values it does not handle -- not tensors, sizes or dtypes that differ,
sparse, nested, on another device, needing gradients, a dtype NumPy lacks,
or a tensor subclass that ``torch.stack`` keeps -- are left to
default_collate (``stack`` gives None).
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import torch

from tfrecord_torch._dtypes import numpy_dtype
from tfrecord_torch.data.transport.shipped import INLINE_BYTES, SLOTS, Inline, SharedBuffers

__all__ = ["Stacker", "stackable_dtype"]


class Stacker:
    """Stacks the values of one key of a batch into reused shared memory;
    one pool of segments per key; safe from several threads.

    Args:
        slots: segments kept per key (see :data:`~.shipped.SLOTS`).
    """

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self._pools: dict[object, SharedBuffers] = {}
        self._lock = threading.Lock()

    def stack(self, key: object, values: list) -> torch.Tensor | None:
        """``torch.stack(values)`` as a tensor to send to the main process
        (over a reused segment, or by value if small), or None if these
        values are left to default_collate."""
        with torch._C.DisableTorchFunctionSubclass():  # tv_tensors' attributes, each a Python call otherwise
            dtype = stackable_dtype(values)
        if dtype is None:
            return None
        first = values[0]
        if len(values) * first.numel() * first.element_size() <= INLINE_BYTES:
            small = torch.stack(values, 0)
            return small.as_subclass(Inline) if type(small) is torch.Tensor else None
        pool = self._pool(key)
        out, token = pool.take((len(values), *first.shape), dtype, zero=False)
        if token is None:  # every segment still held: default_collate's fresh one costs no extra copy
            return None
        stacked = torch.stack(values, 0, out=out)
        if type(stacked) is not torch.Tensor:  # a subclass torch.stack keeps (tv_tensors' return type setting)
            return None
        return pool.ship(out, token)

    def empty(self, key: object, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """An uninitialized tensor of ``shape`` to send to the main process,
        over a reused segment of ``key``'s pool that may be longer (a padded
        batch: its shape differs from batch to batch); None when every
        segment is still held or ``dtype`` has no NumPy equivalent."""
        as_numpy = numpy_dtype(dtype)
        if as_numpy is None:
            return None
        pool = self._pool(key)
        out, token = pool.take(shape, as_numpy, zero=False, grow=True)
        return None if token is None else pool.ship(out, token)

    def _pool(self, key: object) -> SharedBuffers:
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = SharedBuffers(self.slots)
            return pool


def stacks_to_plain(first: torch.Tensor) -> bool:
    """Whether torch.stack of values like ``first`` gives a plain tensor: an
    empty view of it stacks to that type, copying nothing (a tv_tensor stacks
    to its own type under tv_tensors' return type setting "TVTensor").

    Asked once a batch in the main process's collate, so the answer is kept
    per type (torch's tensor and tv_tensors' types) and tv_tensors' setting: the empty stack is two torch calls
    through ``__torch_function__``, each handing the GIL to the decode
    threads. Under a torch function mode (which may change what torch.stack
    gives) it is asked again each time.
    """
    kind = type(first)
    setting = _tv_return_setting()
    if setting is _UNKNOWN or torch._C._is_torch_function_mode_enabled() or not _known(kind):
        return _stacks_to_plain(first)
    key = (kind, setting)
    plain = _PLAIN_STACKS.get(key)
    if plain is None:
        plain = _PLAIN_STACKS[key] = _stacks_to_plain(first)
    return plain


def _stacks_to_plain(first: torch.Tensor) -> bool:
    return type(torch.stack([first.narrow(0, 0, 0)])) is torch.Tensor


def _known(kind: type) -> bool:
    """A type whose stack depends on tv_tensors' setting alone: torch's own
    tensor and tv_tensors' types (another subclass's ``__torch_function__``
    may depend on anything)."""
    return kind is torch.Tensor or kind.__module__.startswith("torchvision.tv_tensors")


_PLAIN_STACKS: dict[tuple[type, object], bool] = {}
_UNKNOWN = object()


def _tv_return_setting() -> object:
    """tv_tensors' return type setting as it stands: None where torchvision's
    tv_tensors are not imported (no tv_tensor exists then), _UNKNOWN where
    its helpers keep the setting under another name (nothing is kept then)."""
    helpers = sys.modules.get("torchvision.tv_tensors._torch_function_helpers")
    return None if helpers is None else getattr(helpers, "_TORCHFUNCTION_SUBCLASS", _UNKNOWN)


def stackable_dtype(values: list) -> np.dtype | None:
    """The NumPy dtype of ``values`` if they are dense CPU tensors of one
    shape and dtype that need no gradient; else None."""
    first = values[0]
    if not isinstance(first, torch.Tensor) or first.layout != torch.strided or first.is_nested or \
            first.device.type != "cpu":
        return None
    shape, dtype = first.shape, first.dtype
    for v in values:
        if not isinstance(v, torch.Tensor) or v.is_nested or v.layout != torch.strided or v.shape != shape or \
                v.dtype != dtype or v.requires_grad or v.device.type != "cpu":
            return None
    return numpy_dtype(dtype)

