"""Collate functions for batches of decoded records."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import default_collate

from tfrecord_torch._dtypes import numpy_dtype
from tfrecord_torch._storage import tensor_over
from tfrecord_torch.features.reused import Reused

__all__ = ["BatchMemory", "batch_memory", "detection_lists", "pad_collate", "sequence_collate", "use_batch_memory"]


class BatchMemory:
    """Where :func:`pad_collate` makes its padded batches (and batch mode its
    columns of fixed-shape :class:`~tfrecord_torch.RawTensor` values), and
    what it does with a batch before returning it: plain tensors here. The
    datasets' layer installs one that, in a DataLoader worker, makes them in
    shared memory the worker uses again and sends small tensors by value
    (:func:`use_batch_memory`)."""

    def empty(self, key: object, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialized tensor of ``shape`` and ``dtype`` for ``key``'s
        batch: over memory used again once the batches made in it are gone
        (:mod:`~tfrecord_torch.features.reused`), for dtypes NumPy has."""
        as_numpy = numpy_dtype(dtype)
        if as_numpy is None:
            return torch.empty(shape, dtype=dtype)
        # moved into shared memory (share_memory_()), the batch still holds the reused memory (_storage)
        return tensor_over(_BATCHES.take(math.prod(shape) * as_numpy.itemsize).view(as_numpy).reshape(shape))

    def finish(self, batch: dict) -> dict:
        """The batch ``pad_collate`` returns."""
        return batch


_BATCHES = Reused(keep=3)  # padded batches: the one held, the one being made, and one more
_MEMORY = BatchMemory()


def use_batch_memory(memory: BatchMemory) -> None:
    """Make :func:`pad_collate`'s batches with ``memory`` from now on, in this process."""
    global _MEMORY
    _MEMORY = memory


def batch_memory() -> BatchMemory:
    """Where this process makes its batches (:func:`use_batch_memory`)."""
    return _MEMORY


def pad_collate(batch: list, *, keys: Sequence[str] = ("image", "mask"), value: int = 0,
                mask_value: int = 255, sequences: Sequence[str] | None = None) -> Any:
    """Collate dicts whose images differ in size, like tf.data's padded_batch.

    Each tensor [C, H, W] under ``keys`` is padded at the bottom and right to
    the largest H and W in the batch with ``value``. For each such key ``k`` the
    batch also holds ``k + "_size"`` (int64 [B, 2]: original H, W) and
    ``k + "_mask"`` (bool [B, H, W], True on real pixels). Segmentation masks
    under ``keys`` (tensors [H, W], such as :class:`~tfrecord_torch.Mask`'s)
    are padded with ``mask_value`` instead -- 255 by default, the ignore index
    segmentation losses expect (``CrossEntropyLoss(ignore_index=255)``). Other
    keys use default_collate.

    Sequences -- a SequenceExample's feature lists ([T, ...]) and variable
    length values (``Int64(shape=None)``, TF's VarLen and Ragged features) --
    are padded at the end to the longest T in the batch with ``value``, and
    ``k + "_length"`` (int64 [B]) holds each T. ``sequences`` names them;
    by default every tensor key (of at least 1 dimension) whose lengths
    differ in this batch is padded (name them to get ``_length`` in every batch).
    Bytes values of a sequence stay lists, beside their ``_length``.
    Other bytes and str values (a ``Bytes()`` or TF string feature, also
    under ``keys``) and lists of them pass through as lists, one per record.

    Use with ``functools.partial(pad_collate, keys=(...), mask_value=...)``.

    In a DataLoader worker (this package's datasets imported), each padded
    sequence batch is made in shared memory the worker uses again once the
    main process lets go of the batch, and the small tensors (lengths, labels)
    travel inside the worker's message: torch would otherwise copy each tensor
    of each batch into a new shared-memory segment. The main process gets
    the same plain tensors.
    """
    if not batch:
        return {}
    return _MEMORY.finish(_padded(batch, keys, value, mask_value, sequences))


def _padded(batch: list, keys: Sequence[str], value: int, mask_value: int, sequences: Sequence[str] | None) -> dict:
    out: dict[str, Any] = {}
    for key in batch[0]:
        values = [item[key] for item in batch]
        if all(isinstance(v, (bytes, str)) for v in values):
            out[key] = values
        elif key in keys and all(isinstance(v, torch.Tensor) and v.dim() == 2 for v in values):
            out[key] = _pad_masks(values, mask_value)
        elif key in keys:
            out.update(_pad(key, values, value))
        elif (key in sequences) if sequences is not None else _ragged(values):
            out.update(_pad_sequences(key, values, value))
        elif all(isinstance(v, list) for v in values):
            out[key] = values  # default_collate would transpose lists of one length
        else:
            out[key] = default_collate(values)
    return out


def sequence_collate(batch: list, sequences: Sequence[str]) -> dict:
    """Batch mode's collate for decoded SequenceExamples: the feature lists
    ``sequences`` padded as :func:`pad_collate` pads them (with
    ``<key>_length``); a context tensor stacked where every record's has one
    shape, else a list of them (a VarLen or Ragged context feature), as batch
    mode gives the variable-length values of Examples."""
    ragged = {k for k, v in batch[0].items() if k not in sequences and isinstance(v, torch.Tensor)
              and len({tuple(item[k].shape) for item in batch}) > 1}
    out = pad_collate([{k: v for k, v in item.items() if k not in ragged} for item in batch], keys=(),
                      sequences=sequences)
    out.update({k: [item[k] for item in batch] for k in ragged})
    return out


def detection_lists(batch: list, *, image: str = "image") -> tuple[list, list[dict]]:
    """Detection samples as what torchvision's detection models take:
    a list of images and a list of per-image target dicts (``boxes``,
    ``labels`` and every other key), each image keeping its own box count
    (:func:`~tfrecord_torch.data.collating.detection_collate` runs it and
    sends its tensors cheaply from a DataLoader worker).

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


def _ragged(values: list) -> bool:
    if all(isinstance(v, list) for v in values):  # bytes values of sequences, Bytes(many=True)
        return len({len(v) for v in values}) > 1
    return all(isinstance(v, torch.Tensor) and v.dim() >= 1 for v in values) and \
        len({v.shape[1:] for v in values}) == 1 and len({v.shape[0] for v in values}) > 1


def _pad_sequences(key: str, values: list, value: int) -> dict:
    lengths = torch.tensor([len(v) for v in values], dtype=torch.int64)
    if not all(isinstance(v, torch.Tensor) for v in values):
        return {key: list(values), f"{key}_length": lengths}
    if len({v.shape[1:] for v in values}) != 1:
        raise ValueError(f"pad_collate: the steps of {key!r} differ in shape: {sorted({tuple(v.shape) for v in values})}")
    longest = int(lengths.max()) if len(values) else 0
    padded = _pad_rows(key, values, longest, value)
    if padded is None:  # values NumPy cannot view: torch copies row by row
        padded = values[0].new_full((len(values), longest, *values[0].shape[1:]), value)
        for i, v in enumerate(values):
            padded[i, :len(v)] = v
    return {key: padded, f"{key}_length": lengths}


def _pad_rows(key: str, values: list, longest: int, value: int) -> torch.Tensor | None:
    """[B, longest, ...]: each value's steps, then ``value``, copied by NumPy
    on the calling thread into the batch memory's tensor for ``key``; None
    where a value has no NumPy view (a dtype NumPy lacks, a tensor that needs
    grad, not on the CPU, a subclass).

    torch copies and fills tensors of more than 32,768 elements on its
    OpenMP team, and an indexed scatter fans out even on small ones: a fork
    and a join per copy whose team threads, on cores other processes keep
    busy, leave this thread waiting (a batch of 32 token lists took 20
    times as long with torch's default threads as with one). The team stays
    the user's, for the model; a batch's copies need none of it.
    """
    first = values[0]
    if any(type(v) is not torch.Tensor or v.requires_grad or v.device.type != "cpu" for v in values):
        return None
    try:
        arrays = [v.numpy() for v in values]
    except (TypeError, RuntimeError):  # bfloat16 and others; conj / neg bits
        return None
    out = _MEMORY.empty(key, (len(values), longest, *first.shape[1:]), first.dtype)
    rows = out.numpy()
    for row, array in zip(rows, arrays):
        row[:len(array)] = array
        row[len(array):] = value
    return out
