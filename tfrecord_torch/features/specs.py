"""Feature specs: which features to decode, and into which tensors.

A spec maps output names to :class:`Feature` objects::

    {"image": Image(), "label": Int64()}
    {"image": Image(key="image/encoded"), "label": Int64(key="image/class/label")}

Each feature reads the record's key (the output name unless ``key=`` says
otherwise). A missing feature takes its ``default`` if one was given, else
raises :class:`~tfrecord_torch.errors.FeatureError` naming the key.
"""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.example.codec import JoinedSteps, PlannedKey
from tfrecord_torch.features.collate import batch_memory
from tfrecord_torch.features.images.decode import (  # noqa: F401
    FRAMES,
    IMAGE_MODES,
    MAX_IMAGE_PIXELS,
    decode_image,
    image_size,
    preload,
)
from tfrecord_torch.features.reused import Reused

__all__ = ["Bytes", "Feature", "Float", "Int64", "RawTensor", "Text", "decode", "decode_batch", "decode_owned",
           "item_plan", "reads_once", "record_dim"]

_REQUIRED = object()
_FRAMES = Reused()  # RawTensor's frames of a record, reused once the record's tensors are gone


class Feature:
    """Base class: decode one feature of a parsed record.

    Each kind of feature (the spec kinds: :class:`Int64`, :class:`Image`,
    :class:`~tfrecord_torch.features.images.Boxes`, ...) says itself how it
    decodes, so no decoder asks which kind it holds. A new kind implements:

    * ``kind``: the list kind its key holds (``"int64"``, ``"float"`` or
      ``"bytes"``; ``""`` for a kind that reads several keys), and the flags
      ``stacks`` and ``spatial`` if they apply;
    * :meth:`convert` (one key's raw value to the output), or :meth:`decode`
      for a kind that reads several keys: one record;
    * :meth:`decode_column` if a batch decodes faster as a whole column than
      value by value (the default calls :meth:`decode` per record);
    * :meth:`decode_steps` if it can be a ``sequence_features`` entry other
      than one :meth:`convert` per step (the default, for bytes kinds), and
      :meth:`check_sequence` if it cannot be one;
    * :meth:`read_plan` if the compiled reader can read it whole (only the
      plain numeric kinds do).

    The per-sample path decodes records on threads only when a feature is
    ``costly`` and every feature is one of this package's kinds and
    ``draws`` nothing (:meth:`~tfrecord_torch.data.recordspec.RecordSpec.ahead`):
    a kind defined elsewhere is always decoded on the iterating thread.

    Decoders call these once per feature and record, or once per column;
    anything a kind must work out once is worked out in its constructor.

    Args:
        key: the record's feature key (default: the spec's output name).
        default: value when the record lacks the key (default: required).
    """

    kind = ""  # "int64", "float" or "bytes": the list kind the record must hold
    stacks = False  # batch mode stacks same-sized values (images, masks) into one tensor
    spatial = False  # a v2 transform moves it with the image (images, masks, boxes)
    costly = False  # a value takes long to decode (an image): worth a decode thread of the per-sample path
    draws = False  # decoding draws from torch's global generator, so it must run in the records' order

    def __init__(self, key: str | None = None, *, default: Any = _REQUIRED) -> None:
        self.key = key
        self.default = default

    def bind(self, name: str) -> Feature:
        """This feature for output ``name``: a copy whose key defaults to the
        name. A copy, because the caller's object may also serve other names
        or other datasets."""
        bound = copy.copy(self)
        if bound.key is None:
            bound.key = name
        return bound

    def raw(self, record: dict) -> Any:
        """The feature's raw value from a parsed record (checked for kind)."""
        value = record.get(self.key)
        if value is None:
            if self.default is _REQUIRED:
                raise missing_feature(self.key, record)
            return None
        got = _kind(value)
        if got == "empty" and self.default is not _REQUIRED:
            return None  # an empty Feature() (no kind set) takes the default, as in TensorFlow
        if got != self.kind and got != "empty":
            raise FeatureError(self.key, f"holds {got} values, expected {self.kind}")
        return value

    def decode(self, record: dict) -> Any:
        value = self.raw(record)
        return self.default if value is None else self.convert(value)

    def decode_owned(self, record: dict) -> Any:
        """:meth:`decode` of a record whose arrays nothing else holds (fresh
        from :func:`parse_example`): the result may keep them, uncopied."""
        return self.decode(record)

    def convert(self, value: Any) -> Any:
        raise NotImplementedError

    def decode_column(self, column: Any, records: Callable[[], list[dict]]) -> Any:
        """Decode a whole batch column (from parse_example_batch); ``records()``
        gives the batch's records as dicts, for features that read several keys."""
        return [self.decode({self.key: v} if v is not None else {}) for v in column]

    def check_sequence(self, name: str) -> None:
        """Raise ValueError if this feature cannot be ``sequence_features[name]``:
        a bytes kind can (each step converted), others say so themselves."""
        if self.kind != "bytes":
            raise ValueError(f"sequence_features[{name!r}]: {type(self).__name__} cannot be a "
                             "sequence feature (use Int64, Float, Bytes or Text)")

    #: Whether :meth:`decode_steps` takes a feature list the parser joined:
    #: a :class:`~tfrecord_torch.example.codec.JoinedSteps` of T steps each
    #: holding one bytes value of n bytes.
    joins_steps = False

    def missing_steps(self, has_lists: bool) -> list:
        """The steps of this feature's list when a SequenceExample lacks it
        (``has_lists``: the record holds any): none, with a default; else a
        FeatureError naming where it looked."""
        if self.default is _REQUIRED:
            where = "the record's feature lists" if has_lists else \
                "the record, which holds no feature lists (a tf.train.Example? read its keys with features=)"
            raise FeatureError(self.key, f"required feature list is missing from {where}")
        return []

    def decode_steps(self, lists: dict, *, has_lists: bool) -> Any:
        """One feature list of a SequenceExample: a list of T values, each step
        as :meth:`convert` makes one record's value."""
        out = []
        steps = lists.get(self.key)
        for t, step in enumerate(steps if steps is not None else self.missing_steps(has_lists)):
            if isinstance(step, np.ndarray):
                raise FeatureError(self.key, f"step {t} holds numbers, expected bytes")
            out.append(self.convert(step))
        return out

    def read_plan(self) -> PlannedKey | None:
        """How the compiled record reader reads this feature whole
        (:func:`~tfrecord_torch.example.codec.read_item`), or None: the usual
        decoding then. Only a kind whose output is the wire array itself plans."""
        return None

    def __repr__(self) -> str:
        options = [f"{k}={v!r}" for k, v in vars(self).items()
                   if not k.startswith("_") and k not in ("key", "default") and not (k == "cast" and v is None)]
        if self.default is not _REQUIRED:
            shown = self.default.tolist() if hasattr(self.default, "tolist") else self.default
            options.append(f"default={shown!r}")
        return f"{type(self).__name__}({', '.join([repr(self.key), *options])})"


def _kind(value) -> str:
    if isinstance(value, np.ndarray):
        return "int64" if value.dtype == np.int64 else "float"
    return "bytes" if value else "empty"


class _Numeric(Feature):
    dtype: np.dtype

    def __init__(self, key: str | None = None, *, shape: tuple | None = (), default: Any = _REQUIRED,
                 cast: torch.dtype | None = None) -> None:
        super().__init__(key, default=default)
        if cast is not None and not isinstance(cast, torch.dtype):
            raise TypeError(f"cast must be a torch.dtype such as torch.bool, got {cast!r}")
        self.cast = None if cast == torch.from_numpy(np.zeros(0, self.dtype)).dtype else cast
        self.shape = None if shape is None else tuple(int(d) for d in shape)
        if self.shape is not None and (self.shape.count(-1) > 1 or any(d < -1 for d in self.shape)):
            raise ValueError(f"shape may hold one -1 (any length) and sizes >= 0, got {shape!r}")
        # the fast path's element count (None: any length; a -1 never matches, so such shapes go by decode)
        self._size = None if self.shape is None else math.prod(self.shape)
        if default is not _REQUIRED and default is not None:
            self.default = self._default_tensor(default)

    def _default_tensor(self, default) -> torch.Tensor:
        """The default as a tensor of the declared shape, so records with and
        without the feature batch together; a single value fills the shape."""
        try:
            array = np.asarray(default.numpy() if isinstance(default, torch.Tensor) else default, self.dtype)
        except (TypeError, ValueError) as e:
            raise ValueError(f"default={default!r} is not a {self.dtype} value") from e
        if self.shape is None:
            array = array.reshape(-1)
        elif -1 in self.shape:
            array = array.reshape(self._fit(array.size, ValueError))
        elif array.size == 1:
            array = np.full(self.shape, array.item(), self.dtype)
        elif array.size == math.prod(self.shape):
            array = array.reshape(self.shape)
        else:
            raise ValueError(f"default has {array.size} values, which do not fit shape={self.shape}")
        return self.finish(torch.from_numpy(array.copy()))  # (np.ascontiguousarray would make a scalar 1-D)

    def finish(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` (of the wire dtype) in the ``cast`` dtype. Integers that
        do not fit the target raise rather than wrap; bool is ``!= 0``, as
        TensorFlow's cast (and so TFDS) makes it."""
        cast = self.cast
        if cast is None:
            return tensor
        if cast == torch.bool:
            return tensor != 0
        if not cast.is_floating_point and not cast.is_complex and tensor.numel():
            info = torch.iinfo(cast)
            low, high = tensor.min().item(), tensor.max().item()
            if low < info.min or high > info.max:
                bad = low if low < info.min else high
                raise FeatureError(self.key, f"value {bad} does not fit {cast}; read it with cast=None "
                                             "(int64) or a wider dtype")
        return tensor.to(cast)

    def convert(self, value: Any) -> torch.Tensor:
        array = np.asarray(value, self.dtype) if not isinstance(value, np.ndarray) or \
            value.dtype != self.dtype else value
        if self.shape is None:
            return self.finish(torch.from_numpy(array.copy()))
        if -1 in self.shape:
            return self.finish(torch.from_numpy(array.reshape(self._fit(array.size, None)).copy()))
        size = math.prod(self.shape)
        if array.size != size:
            raise FeatureError(self.key, f"holds {array.size} values, expected {size} (shape {self.shape})")
        return self.finish(torch.from_numpy(array.reshape(self.shape).copy()))

    def decode_owned(self, record: dict) -> Any:
        value = record.get(self.key)
        if type(value) is np.ndarray and value.dtype is self.dtype and self.cast is None:  # the common case
            if self.shape is None:
                return torch.from_numpy(value)
            if value.size == self._size:
                return torch.from_numpy(value.reshape(self.shape))
        return self.decode(record)  # anything else: the checks, the errors and the default

    def _fit(self, size: int, error: type | None) -> tuple:
        """The declared shape with its -1 resolved for ``size`` values."""
        shape = self.shape or ()
        known = math.prod(d for d in shape if d != -1)
        if (known == 0 and size) or (known and size % known):
            message = f"{size} values do not fit shape {self.shape}"
            raise error(message) if error is not None else FeatureError(self.key, message)
        return tuple((size // known if known else 0) if d == -1 else d for d in shape)

    def decode(self, record: dict) -> Any:
        value = self.raw(record)
        if value is not None:
            return self.convert(value)
        # A copy: a transform that edits its input in place must not change the default.
        return None if self.default is None else self.default.clone()

    def check_sequence(self, name: str) -> None:
        if self.shape is None:
            raise ValueError(f"sequence_features[{name!r}]: give the per-step shape (shape=() for one "
                             "value per step)")

    def decode_steps(self, lists: dict, *, has_lists: bool) -> torch.Tensor:
        """One feature list as a tensor [T, *shape]."""
        steps = lists.get(self.key)
        if steps is None:
            steps = self.missing_steps(has_lists)
        shape = self.shape or ()
        size = math.prod(shape)
        try:
            kinds = {(step.dtype, step.size) for step in steps}
        except AttributeError:  # a bytes step: the loop below names it
            kinds = None
        if kinds is None or kinds - {(self.dtype, size)}:
            self._check_steps(steps, size, shape)
        flat = np.concatenate(steps) if steps else np.zeros(0, self.dtype)  # a fresh array
        return self.finish(torch.from_numpy(flat.reshape((len(steps), *shape))))

    def _check_steps(self, steps: list, size: int, shape: tuple) -> None:
        """Raise the error that names the first step of the wrong kind or size."""
        for t, step in enumerate(steps):
            if not isinstance(step, np.ndarray) or step.dtype != self.dtype:
                got = ("int64" if step.dtype == np.int64 else "float") if isinstance(step, np.ndarray) else \
                    "bytes" if step else "no"
                raise FeatureError(self.key, f"step {t} holds {got} values, expected {self.kind}")
            if step.size != size:
                raise FeatureError(self.key, f"step {t} holds {step.size} values, expected {size} "
                                             f"(shape {shape})")

    def read_plan(self) -> PlannedKey | None:
        """The compiled reader's entry for this feature: uncast, of a fixed
        shape (no -1, at most 8 dimensions) or ``shape=None``, and of a class
        that decodes as Int64 and Float do (a subclass that changes decoding
        is never read past its own code)."""
        if self.key is None or self.cast is not None or \
                (self.shape is not None and (-1 in self.shape or len(self.shape) > 8)):
            return None  # unbound, cast, or a shape the reader does not make
        if any(getattr(type(self), m) is not getattr(_Numeric, m) for m in _DECODING):
            return None
        return PlannedKey(None, self.key.encode(), self.kind == "float", self.shape)

    def decode_column(self, column: Any, records: Callable[[], list[dict]]) -> Any:
        if isinstance(column, np.ndarray) and self.shape is not None and -1 not in self.shape and \
                column.dtype == self.dtype:
            size = math.prod(self.shape)
            if column.shape[1] != size:
                raise FeatureError(self.key, f"holds {column.shape[1]} values, expected {size} "
                                             f"(shape {self.shape})")
            return self.finish(torch.from_numpy(column.reshape((len(column),) + self.shape)))
        if isinstance(column, np.ndarray):
            column = list(column)
        values = [self.decode({self.key: v} if v is not None else {}) for v in column]
        return stacked_column(values, self.shape, (type(self).__name__, self.key))


_DECODING = ("decode", "decode_owned", "convert", "finish", "raw")  # what the compiled reader does instead


class Int64(_Numeric):
    """An int64 list as an int64 tensor: ``shape=()`` gives a scalar [] (exactly
    one value), a tuple gives that shape, ``shape=None`` a 1-D tensor of any length.
    ``cast=torch.bool`` (or ``torch.int32``, ``torch.uint8``, ...) gives that
    dtype instead: TFDS stores bool and narrow integer tensors as int64 lists.
    A value that does not fit the narrower dtype raises (nothing wraps)."""

    kind = "int64"
    dtype = np.dtype(np.int64)


class Float(_Numeric):
    """A float list as a float32 tensor; ``shape`` and ``cast`` (e.g.
    ``torch.float64``, as TFDS reads its float64 tensors) as for :class:`Int64`."""

    kind = "float"
    dtype = np.dtype(np.float32)


class Bytes(Feature):
    """A bytes list: the single value as bytes, or all values with ``many=True``."""

    kind = "bytes"

    def __init__(self, key: str | None = None, *, many: bool = False, default: Any = _REQUIRED) -> None:
        super().__init__(key, default=default)
        self.many = many

    def convert(self, value: Any) -> Any:
        if self.many:
            return list(value)
        if len(value) != 1:
            raise FeatureError(self.key, f"holds {len(value)} values, expected 1 (use many=True)")
        return value[0]


class Text(Bytes):
    """A bytes list decoded as UTF-8 str (or a list of str with ``many=True``)."""

    def convert(self, value: Any) -> Any:
        try:
            out = [v.decode("utf-8") for v in value]
        except UnicodeDecodeError as e:
            raise FeatureError(self.key, f"is not valid UTF-8: {e}") from e
        return super().convert(out)


def missing_feature(key: str | None, record: dict) -> FeatureError:
    """The error for a required ``key`` absent from ``record``: the keys the
    record has, the closest one, and the two fixes."""
    keys = sorted(record)
    shown = ", ".join(repr(k) for k in keys[:20]) + (f", ... ({len(keys)} keys)" if len(keys) > 20 else "")
    close = difflib.get_close_matches(str(key), keys, n=1, cutoff=0.5)
    guess = f"; did you mean {close[0]!r}? (spec it with key={close[0]!r})" if close else ""
    return FeatureError(key, f"required feature is missing; the record has keys [{shown}]{guess}; "
                             f"give default= for records that may lack it")


def record_dim(record: dict, key: str, for_key: str | None) -> int:
    """One int64 size from a record: a height, width or channel count that
    ``for_key``'s raw bytes need (FeatureError naming the key otherwise)."""
    value = record.get(key)
    if not isinstance(value, np.ndarray) or value.dtype != np.int64 or value.size != 1:
        raise FeatureError(key, f"needed for the shape of {for_key!r}: expected one int64 value")
    dim = int(value[0])
    if not 0 < dim <= 1 << 16:
        raise FeatureError(key, f"dimension {dim} is out of range")
    return dim


class RawTensor(Feature):
    """Array bytes (``ndarray.tobytes()``, optionally zlib-compressed: TFDS's
    Tensor feature with ``encoding="bytes"``/``"zlib"``) as a tensor of ``shape``."""

    kind = "bytes"

    def __init__(self, key: str | None = None, *, dtype: str = "uint8", shape: tuple = (-1,),
                 zlib: bool = False, default: Any = _REQUIRED) -> None:
        super().__init__(key, default=default)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError as e:
            raise ValueError(f"dtype must be a numpy dtype name, got {dtype!r}") from e
        if self.dtype.kind not in "biuf" or self.dtype.itemsize == 0:
            raise ValueError(f"dtype must be a numeric numpy dtype, got {dtype!r}")
        self.shape, self.zlib = tuple(shape), zlib

    def convert(self, value: Any) -> Any:
        if len(value) != 1:
            raise FeatureError(self.key, f"holds {len(value)} values, expected 1")
        data = value[0]
        if self.zlib:
            import zlib

            known = -1 not in self.shape
            limit = math.prod(self.shape) * self.dtype.itemsize if known else MAX_IMAGE_PIXELS
            limit = min(limit, MAX_IMAGE_PIXELS * 8)
            try:
                data = zlib.decompressobj().decompress(data, limit + 1)  # bounded: no bombs
            except zlib.error as e:
                raise FeatureError(self.key, f"bad zlib data: {e}") from e
            if len(data) > limit:
                raise FeatureError(self.key, f"inflates past the {limit} bytes its shape allows")
        if len(data) % self.dtype.itemsize:
            raise FeatureError(self.key, f"{len(data)} bytes is not a whole number of {self.dtype}")
        array = np.frombuffer(data, self.dtype)
        try:
            array = array.reshape(self.shape)
        except ValueError:
            raise FeatureError(self.key, f"{array.size} values do not fit shape {self.shape}") from None
        return torch.from_numpy(array.astype(array.dtype.newbyteorder("="), copy=True))

    def decode_column(self, column: Any, records: Callable[[], list[dict]]) -> Any:
        """A batch's values: of a fixed ``shape`` (no -1), one tensor [B,
        *shape], as the per-sample path's collate stacks them (uncompressed
        values of the right length copied once, straight into it); else a
        list of B tensors. A default that is not a tensor of ``shape``
        leaves the column a list. The tensor is made where the process makes
        its batches (:func:`~tfrecord_torch.features.collate.batch_memory`:
        in a DataLoader worker, a shared-memory segment it uses again)."""
        if -1 in self.shape:
            return super().decode_column(column, records)
        row = math.prod(self.shape) * self.dtype.itemsize
        if row and not self.zlib:
            values = [v[0] for v in column if v is not None and len(v) == 1 and type(v[0]) is bytes
                      and len(v[0]) == row]
            if values and len(values) == len(column):
                out = batch_memory().empty(("RawTensor", self.key), (len(values), *self.shape), self._torch_dtype())
                array = out.numpy()
                rows = array.reshape(len(values), -1).view(np.uint8)
                for i, value in enumerate(values):
                    rows[i] = np.frombuffer(value, np.uint8)
                if not self.dtype.isnative:
                    array.byteswap(inplace=True)  # the values' bytes, in this machine's order
                return out
        decoded = super().decode_column(column, records)  # a record's errors, defaults
        return stacked_column(decoded, self.shape, ("RawTensor", self.key))

    def decode_steps(self, lists: dict, *, has_lists: bool) -> torch.Tensor:
        """Array bytes, one value per step, as one tensor [T, *shape], as
        ``tf.io.decode_raw`` of a ``FixedLenSequenceFeature([], tf.string)``
        gives [T, n]: a tensor, so that :func:`~tfrecord_torch.pad_collate` pads
        it. Steps of one byte length (every frame of a YouTube-8M record) are
        read in one copy from where they lie in the record, not one tensor
        per frame."""
        steps = lists.get(self.key)
        if isinstance(steps, JoinedSteps):  # where the frames lie in the payload
            return self._joined(steps)
        if steps is None:
            steps = self.missing_steps(has_lists)
        if not steps:
            return torch.zeros((0, *(0 if d == -1 else d for d in self.shape)), dtype=self._torch_dtype())
        try:  # every step one value (the checks run in C: frames are many)
            values = [value for (value,) in steps]
        except (TypeError, ValueError):  # a step of numbers, or of 0 or 2+ values: the check names it
            values = []
        if len(values) != len(steps) or set(map(type, values)) != {bytes}:
            self._check_raw_steps(steps)
        first = self._step(steps, 0)
        if not self.zlib and len(set(map(len, values))) == 1:
            array = np.frombuffer(bytearray().join(values), self.dtype)  # one copy, writable
            return torch.from_numpy(array.astype(array.dtype.newbyteorder("="), copy=False)
                                    .reshape((len(steps), *first.shape)))
        tensors = [first] + [self._step(steps, t) for t in range(1, len(steps))]
        for t, tensor in enumerate(tensors):
            if tensor.shape != first.shape:
                raise FeatureError(self.key, f"step {t} holds shape {tuple(tensor.shape)}, step 0 "
                                             f"{tuple(first.shape)}: the steps of a feature list stack "
                                             "into one tensor [T, ...]; give RawTensor(shape=...) without -1")
        return torch.stack(tensors)

    @property
    def joins_steps(self) -> bool:  # type: ignore[override]
        return not self.zlib

    def _joined(self, joined: JoinedSteps) -> torch.Tensor:
        """[T, *shape] from frames where they lie in the payload, copied in
        one strided copy into reused memory (:mod:`~tfrecord_torch.features.reused`):
        step 0 checked as every step would be, all being of its length."""
        frames = joined.view()
        first = self._step([[frames[0].tobytes()]], 0)
        out = _FRAMES.take(frames.size)
        out.reshape(frames.shape)[...] = frames
        array = out.view(self.dtype)
        return torch.from_numpy(array.astype(array.dtype.newbyteorder("="), copy=False)
                                .reshape((len(frames), *first.shape)))

    def _check_raw_steps(self, steps: list) -> None:
        """Raise the error that names the first step not holding one bytes value."""
        for t, step in enumerate(steps):
            if isinstance(step, np.ndarray):
                raise FeatureError(self.key, f"step {t} holds numbers, expected bytes")
            if len(step) != 1:
                raise FeatureError(self.key, f"step {t} holds {len(step)} values, expected 1")

    def _step(self, steps: list, t: int) -> torch.Tensor:
        """Step ``t`` decoded, an error naming the step."""
        try:
            return self.convert(steps[t])
        except FeatureError as e:
            raise FeatureError(self.key, f"step {t}: {e.reason}") from e

    def _torch_dtype(self) -> torch.dtype:
        return torch.from_numpy(np.zeros(0, self.dtype.newbyteorder("="))).dtype


def stacked_column(values: list, shape: tuple | None, key: object) -> torch.Tensor | list:
    """A batch column of a fixed ``shape`` (no -1) as one tensor [B, *shape],
    stacked where the process makes its batches (:func:`batch_memory`, under
    ``key``), when every value is a tensor of that shape and one dtype
    (defaults may not be); else ``values``, a list, as for values of varying
    length."""
    if shape is None or -1 in shape or not values:
        return values
    first = values[0]
    if not all(isinstance(v, torch.Tensor) and v.shape == shape and v.dtype == getattr(first, "dtype", None)
               for v in values):
        return values
    out = batch_memory().empty(key, (len(values), *shape), first.dtype)
    torch.stack(values, out=out)
    return out


def bind(spec: dict) -> dict:
    """Check a spec; a new spec of bound copies (:meth:`Feature.bind`), the
    caller's dict and features left as they were."""
    if not isinstance(spec, dict) or not spec:
        raise ValueError(f"features must be a non-empty dict of name -> Feature, got {spec!r}")
    for name, feature in spec.items():
        if not isinstance(feature, Feature):
            raise ValueError(f"features[{name!r}] must be a Feature (Int64(), Image(), ...), "
                             f"got {feature!r}")
    return {name: feature.bind(name) for name, feature in spec.items()}


def decode(record: dict, spec: dict) -> dict:
    """Decode one parsed record with a (bound) spec."""
    return {name: feature.decode(record) for name, feature in spec.items()}


def decode_owned(record: dict, spec: dict) -> dict:
    """:func:`decode` of a record fresh from :func:`parse_example`, for a spec
    that reads each key once (:func:`reads_once`): tensors may take over its
    arrays instead of copying them."""
    return {name: feature.decode_owned(record) for name, feature in spec.items()}


def item_plan(spec: dict | None) -> tuple[PlannedKey, ...] | None:
    """The spec as a plan for the compiled record reader
    (:func:`~tfrecord_torch.example.codec.read_item`): each feature's
    :meth:`Feature.read_plan` under its output name, when every feature has
    one (at most 32); None otherwise (the usual decoding then)."""
    if not isinstance(spec, dict) or not spec or len(spec) > 32:
        return None
    plan = []
    for name, feature in spec.items():
        entry = feature.read_plan()
        if entry is None:
            return None
        plan.append(entry._replace(name=name))
    return tuple(plan)


def reads_once(spec: dict) -> bool:
    """True if no two features of ``spec`` read the same key (so no two
    outputs of :func:`decode_owned` can share an array)."""
    keys = [feature.key for feature in spec.values()]
    return len(set(keys)) == len(keys)


def decode_batch(columns: dict, spec: dict, size: int) -> dict:
    """Decode the columns of a parsed batch (parse_example_batch) with a spec:
    fixed-shape numeric features become one tensor [B, ...]; images become one
    tensor [B, C, H, W] if all have the same size, else a list."""
    cache: list = []

    def records() -> list:  # per-record dicts, built only for features that need them
        if not cache:
            cache.extend({k: c[i] for k, c in columns.items() if c[i] is not None}
                         for i in range(size))
        return cache

    out = {}
    for name, feature in spec.items():
        column = columns.get(feature.key, [None] * size)
        values = feature.decode_column(column, records)
        if feature.stacks and values and \
                len({tuple(v.shape) for v in values if isinstance(v, torch.Tensor)}) == 1 and \
                all(isinstance(v, torch.Tensor) for v in values):
            values = torch.stack(values)
        out[name] = values
    return out
