"""SequenceExample specs: context features plus feature lists of steps.

A sequence feature is a :class:`~tfrecord_torch.features.specs.Feature` whose
shape is the shape of one step, as in TensorFlow's
``FixedLenSequenceFeature``: ``Int64("tokens")`` gives int64 [T],
``Float("frames", shape=(3,))`` float32 [T, 3]; ``Bytes``/``Text`` give a
list of T values; ``RawTensor(dtype="uint8", shape=(1024,))`` over one bytes
value per step (YouTube-8M's frame-level ``rgb``) gives uint8 [T, 1024]. A missing feature list is an error unless the feature has a
``default`` (any value: the list is then empty, [0, ...], as TF's
``allow_missing=True``). TF's ``VarLenFeature`` and ``RaggedFeature`` in
``sequence_features`` read as :class:`~tfrecord_torch.features.ragged.StepRows`: a list of T rows.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import torch

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.example.codec import parse_sequence_example
from tfrecord_torch.features.payload import Payload
from tfrecord_torch.features.ragged import StepRows
from tfrecord_torch.features.specs import _REQUIRED, Feature, RawTensor, _Numeric, bind

__all__ = ["SequenceSpec", "decode_steps", "hint_sequence_example", "make_spec"]


class SequenceSpec:
    """A bound context spec (may be empty) and a bound sequence spec."""

    def __init__(self, context: dict | None, sequence: dict) -> None:
        self.context = bind(context) if context else {}
        self.sequence = bind(sequence)
        for name, feature in self.sequence.items():
            if not isinstance(feature, (_Numeric, StepRows)) and feature.kind != "bytes":
                raise ValueError(f"sequence_features[{name!r}]: {type(feature).__name__} cannot be a "
                                 "sequence feature (use Int64, Float, Bytes or Text)")
            if isinstance(feature, _Numeric) and feature.shape is None:
                raise ValueError(f"sequence_features[{name!r}]: give the per-step shape (shape=() for one "
                                 "value per step)")
        clash = set(self.context) & set(self.sequence)
        if clash:
            raise ValueError(f"names in both features and sequence_features: {sorted(clash)}")

    def __iter__(self):
        yield from self.context
        yield from self.sequence

    def keys(self) -> list[str]:
        return [*self.context, *self.sequence]

    def decode_payload(self, payload: bytes) -> dict:
        """Decode a serialized SequenceExample with this spec."""
        context, lists = parse_sequence_example(payload)
        out = {name: feature.decode(context) for name, feature in self.context.items()}
        for name, feature in self.sequence.items():
            out[name] = decode_steps(feature, lists, has_lists=bool(lists))
        return out


def decode_steps(feature: Feature, lists: dict, *, has_lists: bool) -> Any:
    """One feature list as a tensor [T, *shape] (numeric, or array bytes read
    by a :class:`~tfrecord_torch.features.specs.RawTensor`) or a list of T values."""
    if isinstance(feature, StepRows):
        return feature.decode_steps(lists)
    key = feature.key
    steps = lists.get(key)
    if steps is None:
        if feature.default is _REQUIRED:
            where = "the record's feature lists" if has_lists else \
                "the record, which holds no feature lists (a tf.train.Example? read its keys with features=)"
            raise FeatureError(key, f"required feature list is missing from {where}")
        steps = []
    if isinstance(feature, _Numeric):
        shape = feature.shape or ()
        size = math.prod(shape)
        try:
            kinds = {(step.dtype, step.size) for step in steps}
        except AttributeError:  # a bytes step: the loop below names it
            kinds = None
        if kinds is None or kinds - {(feature.dtype, size)}:
            _check_steps(feature, steps, size, shape)
        flat = np.concatenate(steps) if steps else np.zeros(0, feature.dtype)  # a fresh array
        return feature.finish(torch.from_numpy(flat.reshape((len(steps), *shape))))
    if isinstance(feature, RawTensor):
        return raw_steps(feature, steps)
    out = []
    for t, step in enumerate(steps):
        if isinstance(step, np.ndarray):
            raise FeatureError(key, f"step {t} holds numbers, expected bytes")
        out.append(feature.convert(step))
    return out


def raw_steps(feature: RawTensor, steps: list) -> torch.Tensor:
    """Array bytes, one value per step, as one tensor [T, *shape], as
    ``tf.io.decode_raw`` of a ``FixedLenSequenceFeature([], tf.string)``
    gives [T, n]: a tensor, so that :func:`~tfrecord_torch.pad_collate` pads
    it. Steps of one byte length (every frame of a YouTube-8M record) are
    joined and read in one copy, not one tensor per frame."""
    if not steps:
        return torch.zeros((0, *(0 if d == -1 else d for d in feature.shape)), dtype=_torch_dtype(feature))
    values = list(itertools.chain.from_iterable(steps))  # the checks below run in C: frames are many
    if set(map(len, steps)) != {1} or set(map(type, values)) != {bytes}:
        _check_raw_steps(feature, steps)
    first = _step(feature, steps, 0)
    if not feature.zlib and len(set(map(len, values))) == 1:
        array = np.frombuffer(b"".join(values), feature.dtype)
        return torch.from_numpy(array.astype(array.dtype.newbyteorder("="))
                                .reshape((len(steps), *first.shape)))
    tensors = [first] + [_step(feature, steps, t) for t in range(1, len(steps))]
    for t, tensor in enumerate(tensors):
        if tensor.shape != first.shape:
            raise FeatureError(feature.key, f"step {t} holds shape {tuple(tensor.shape)}, step 0 "
                                            f"{tuple(first.shape)}: the steps of a feature list stack "
                                            "into one tensor [T, ...]; give RawTensor(shape=...) without -1")
    return torch.stack(tensors)


def _check_raw_steps(feature: RawTensor, steps: list) -> None:
    """Raise the error that names the first step not holding one bytes value."""
    for t, step in enumerate(steps):
        if isinstance(step, np.ndarray):
            raise FeatureError(feature.key, f"step {t} holds numbers, expected bytes")
        if len(step) != 1:
            raise FeatureError(feature.key, f"step {t} holds {len(step)} values, expected 1")


def _step(feature: RawTensor, steps: list, t: int) -> torch.Tensor:
    """Step ``t`` decoded, an error naming the step."""
    try:
        return feature.convert(steps[t])
    except FeatureError as e:
        raise FeatureError(feature.key, f"step {t}: {e.reason}") from e


def _torch_dtype(feature: RawTensor) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, feature.dtype.newbyteorder("="))).dtype


def _check_steps(feature: _Numeric, steps: list, size: int, shape: tuple) -> None:
    """Raise the error that names the first step of the wrong kind or size."""
    for t, step in enumerate(steps):
        if not isinstance(step, np.ndarray) or step.dtype != feature.dtype:
            got = ("int64" if step.dtype == np.int64 else "float") if isinstance(step, np.ndarray) else \
                "bytes" if step else "no"
            raise FeatureError(feature.key, f"step {t} holds {got} values, expected {feature.kind}")
        if step.size != size:
            raise FeatureError(feature.key, f"step {t} holds {step.size} values, expected {size} (shape {shape})")


def make_spec(features: dict | Payload | None, sequence_features: dict | None = None
              ) -> dict | SequenceSpec | Payload | None:
    """The bound spec a dataset decodes with: a dict for Examples, a
    :class:`SequenceSpec` when ``sequence_features`` is given, a
    :class:`~tfrecord_torch.features.payload.Payload` as given, or None. TF
    feature descriptions are converted (:mod:`tfrecord_torch.features.tfspec`).

    Raises:
        ValueError: ``features=Payload(...)`` with ``sequence_features``.
    """
    if isinstance(features, Payload):
        if sequence_features is not None:
            raise ValueError(f"features={features!r} reads each record's payload as it is, not as a "
                             "SequenceExample, so sequence_features= cannot apply; give sequence_features= "
                             "(with features= for the context) to parse SequenceExamples, or "
                             "features=Payload(...) alone for records that are not Examples")
        return features
    from tfrecord_torch.features.kinds import from_kinds, has_kinds
    from tfrecord_torch.features.tfspec import convert, is_description

    if has_kinds(features):  # written for the tfrecord package
        features = from_kinds(features)
    if has_kinds(sequence_features):
        sequence_features = from_kinds(sequence_features, argument="sequence_features")
    if isinstance(features, dict) and any(is_description(v) for v in features.values()):
        features = convert(features)
    if isinstance(sequence_features, dict) and any(is_description(v) for v in sequence_features.values()):
        sequence_features = convert(sequence_features, sequence=True)
    if sequence_features is not None:
        return SequenceSpec(features, sequence_features)
    return bind(features) if features is not None else None


def hint_sequence_example(error: FeatureError, payload: bytes) -> FeatureError:
    """A missing-key error, told that the record is a SequenceExample when it has feature lists."""
    if "required feature is missing" not in (error.reason or ""):
        return error
    try:
        _, lists = parse_sequence_example(payload)
    except Exception:  # not a SequenceExample either: the plain message stands
        return error
    if not lists:
        return error
    shown = sorted(lists)[:5]
    return FeatureError(error.key, f"required feature is missing; the record is a tf.train.SequenceExample "
                                   f"with feature lists {shown}: read them with "
                                   f"TFRecordDataset(..., features=<context spec>, sequence_features="
                                   f"{{{shown[0]!r}: Int64()}}) (or parse_sequence_example)",
                        error.path, error.offset, error.record)
