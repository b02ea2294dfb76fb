"""The parse functions as users call them: with an optional description.

``parse_example(payload)`` gives the raw values (:mod:`tfrecord_torch.example.codec`);
``parse_example(payload, features=description)`` decodes them as
``tf.io.parse_single_example(serialized, features)`` does, with the values a
``TFRecordDataset(..., features=description)`` gives (a TF feature
description or this package's specs). The same for SequenceExamples and for
the batch parsers, whose values are batch mode's (``batch_size=``). Torch is
imported only when a description is given, so the raw parsers stay light.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from tfrecord_torch._types import Bytes
from tfrecord_torch.example import batch as _batch
from tfrecord_torch.example import codec as _codec
from tfrecord_torch.example import seqbatch as _seqbatch

__all__ = ["parse_example", "parse_example_batch", "parse_sequence_example", "parse_sequence_example_batch"]


def parse_example(payload: Bytes, features: dict | None = None) -> dict:
    """Decode a serialized tf.train.Example.

    Args:
        payload: the serialized Example.
        features: None for the raw values (int64 array [N], float32 array
            [N] or list of bytes per key, keys sorted); or a spec / TF feature
            description, as ``TFRecordDataset(features=...)`` takes, for the
            values that dataset gives.

    Raises:
        ExampleDecodeError: the payload is not a valid Example.
        FeatureError: a value does not fit its description (names the key).
        ValueError: a bad description (names the key).
    """
    if features is None:
        return _codec.parse_example(payload)
    from tfrecord_torch.features.sequence import make_spec
    from tfrecord_torch.features.specs import decode

    return decode(_codec.parse_example(payload), cast(dict, make_spec(features)))


def parse_sequence_example(payload: Bytes, context_features: dict | None = None,
                           sequence_features: dict | None = None) -> tuple[dict, dict]:
    """Decode a serialized tf.train.SequenceExample.

    Args:
        payload: the serialized SequenceExample.
        context_features: None for the raw context (as :func:`parse_example`
            gives it); or specs / a TF description (as
            ``tf.io.parse_single_sequence_example`` takes them, and
            ``TFRecordDataset(features=...)``), for the values that dataset gives.
        sequence_features: None for the raw feature lists (each the list of its
            steps' values); or specs / a TF description of the feature lists (as
            ``TFRecordDataset(sequence_features=...)`` takes them).

    Returns:
        ``(context, feature_lists)``.
    """
    if context_features is None and not sequence_features:
        return _codec.parse_sequence_example(payload)
    from tfrecord_torch.features.sequence import make_spec
    from tfrecord_torch.features.specs import decode

    if not sequence_features:  # the context alone
        return decode(_codec.parse_sequence_example(payload)[0], cast(dict, make_spec(context_features))), {}
    spec: Any = make_spec(context_features, sequence_features)
    out = spec.decode_payload(payload if isinstance(payload, bytes) else bytes(payload))
    return {k: out[k] for k in spec.context}, {k: out[k] for k in spec.sequence}


def parse_example_batch(records: Sequence[Bytes], features: dict | None = None) -> dict:
    """Decode a batch of serialized tf.train.Examples.

    Args:
        records: the payloads.
        features: None for the raw columns
            (:func:`tfrecord_torch.example.batch.parse_example_batch`); or a
            spec / TF description, for the batch ``TFRecordDataset(...,
            features=..., batch_size=...)`` gives (fixed shapes stacked [B, ...],
            other values a list per record).
    """
    columns = _batch.parse_example_batch(records)
    if features is None:
        return columns
    from tfrecord_torch.features.sequence import make_spec
    from tfrecord_torch.features.specs import decode_batch

    return decode_batch(columns, cast(dict, make_spec(features)), len(records))


def parse_sequence_example_batch(records: Sequence[Bytes], context_features: dict | None = None,
                                 sequence_features: dict | None = None) -> tuple[dict, dict, dict]:
    """Decode a batch of serialized tf.train.SequenceExamples.

    Args:
        records: the payloads.
        context_features: None for the raw context columns
            (:func:`tfrecord_torch.example.seqbatch.parse_sequence_example_batch`);
            or specs / a TF description, for the values batch mode gives.
        sequence_features: None for the raw feature lists; or specs / a TF
            description of the feature lists, for the values batch mode gives.

    Returns:
        ``(context, feature_lists, lengths)``: with descriptions, the feature
        lists padded to the longest T (lists of rows stay lists) and each
        one's lengths, int64 [B], as ``tf.io.parse_sequence_example`` returns them.
    """
    if context_features is None and sequence_features is None:
        return _seqbatch.parse_sequence_example_batch(records)
    from tfrecord_torch.features.collate import sequence_collate

    decoded = [parse_sequence_example(r, context_features, sequence_features) for r in records]
    if not decoded:
        return {}, {}, {}
    context = sequence_collate([c for c, _ in decoded], ())
    names = tuple(decoded[0][1])
    lists = sequence_collate([s for _, s in decoded], names)
    return context, {k: lists[k] for k in names}, {k: lists[f"{k}_length"] for k in names}
