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

from typing import Any

from tfrecord_torch.errors import FeatureError
from tfrecord_torch.example.codec import parse_sequence_example
from tfrecord_torch.features.payload import Payload
from tfrecord_torch.features.specs import Feature, bind

__all__ = ["SequenceSpec", "decode_steps", "hint_sequence_example", "make_spec"]


class SequenceSpec:
    """A bound context spec (may be empty) and a bound sequence spec."""

    def __init__(self, context: dict | None, sequence: dict) -> None:
        self.context = bind(context) if context else {}
        self.sequence = bind(sequence)
        for name, feature in self.sequence.items():
            feature.check_sequence(name)
        clash = set(self.context) & set(self.sequence)
        if clash:
            raise ValueError(f"names in both features and sequence_features: {sorted(clash)}")
        self._joined = _joined_keys(self.sequence.values())

    def __iter__(self):
        yield from self.context
        yield from self.sequence

    def keys(self) -> list[str]:
        return [*self.context, *self.sequence]

    def decode_payload(self, payload: bytes) -> dict:
        """Decode a serialized SequenceExample with this spec."""
        context, lists = parse_sequence_example(payload, self._joined)
        out = {name: feature.decode(context) for name, feature in self.context.items()}
        has_lists = bool(lists)
        for name, feature in self.sequence.items():
            out[name] = feature.decode_steps(lists, has_lists=has_lists)
        return out


def _joined_keys(features) -> frozenset[str]:
    """The feature lists the parser may hand over as where their frames lie
    (:class:`~tfrecord_torch.example.codec.JoinedSteps`): each read by one
    feature that takes them so (:attr:`Feature.joins_steps`) and by nothing
    else, not even as another feature's partition."""
    features = list(features)
    reads: dict[str, int] = {}
    for feature in features:
        for key in [feature.key, *(arg for _, arg in getattr(feature, "partitions", ()))]:
            reads[key] = reads.get(key, 0) + 1
    return frozenset(f.key for f in features if f.joins_steps and reads[f.key] == 1)


def decode_steps(feature: Feature, lists: dict, *, has_lists: bool) -> Any:
    """One feature list as a tensor [T, *shape] (numeric, or array bytes read
    by a :class:`~tfrecord_torch.features.specs.RawTensor`) or a list of T values:
    the feature's own :meth:`~tfrecord_torch.features.specs.Feature.decode_steps`."""
    return feature.decode_steps(lists, has_lists=has_lists)


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
