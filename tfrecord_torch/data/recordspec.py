"""What a dataset's ``features=`` says each record is, as one object that
decodes records of its kind.

A dataset keeps ``spec`` as it was bound (:func:`~tfrecord_torch.features.sequence.make_spec`):
a dict of features (each record a ``tf.train.Example``), a
:class:`~tfrecord_torch.features.sequence.SequenceSpec` (a
``tf.train.SequenceExample``), a :class:`~tfrecord_torch.features.payload.Payload`
(records read as they are) or None (Examples parsed, not decoded).
:func:`record_spec` wraps it in the :class:`RecordSpec` of its kind, the one
place that asks which kind it is; the readers (``reading.py``, ``batchmode.py``,
``fetch.py``, the datasets) call the kind's methods -- decode one record,
begin a batch, read with the compiled reader, describe -- so a new kind of
record is one class here, not a branch in each reader
(``tests/project/test_example_layer.py`` fails on such a branch).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

import numpy as np
import torch

from tfrecord_torch._pending import Done, Failed, Later, Pending
from tfrecord_torch.data.counts import SharedErrorPolicy
from tfrecord_torch.data.imagebatch import (
    DecodedBatch,
    ImageBatches,
    SizeMismatch,
    drop_rows,
    fuse_per_sample,
    is_v2_transform,
    laid_out_for,
    refuse_decoder,
)
from tfrecord_torch.data.reading import SKIPPED, Located, locate, serialized_tensor
from tfrecord_torch.errors import CorruptRecordError, ExampleDecodeError, FeatureError, MixedSizesError
from tfrecord_torch.example.batch import parse_example_batch, parse_record_batch
from tfrecord_torch.example.codec import parse_example, parse_record, read_example, read_item
from tfrecord_torch.features.collate import sequence_collate
from tfrecord_torch.features.images.engine import ImageBatching
from tfrecord_torch.features.payload import Payload
from tfrecord_torch.features.sequence import SequenceSpec, hint_sequence_example
from tfrecord_torch.features.specs import decode, decode_owned, item_plan, reads_once
from tfrecord_torch.features.undecoded import apply_transform

__all__ = ["BatchRun", "FusedPerSample", "PerSample", "RecordBatch", "RecordSpec", "decode_or_skip", "mixed_sizes",
           "record_spec"]


class RecordBatch(NamedTuple):
    """The records of one batch: their payloads, a way to their locations
    (built only when a bad record must be named), and the batch's number
    (it seeds the batch's crops)."""

    payloads: list[bytes]
    items: Callable[[], list[Located]]
    number: int


class BatchRun(NamedTuple):
    """What decoding a batch reports to and ends with: the dataset's error
    policy, its transform, and the iterator's batch image decoder."""

    policy: SharedErrorPolicy
    transform: Callable | None
    images: ImageBatches


class PerSample(NamedTuple):
    """What the per-sample path decodes with: the record spec (with a fused
    crop) and the rest of the transform."""

    record: RecordSpec
    transform: Callable | None


class RecordSpec(ABC):
    """One kind of record: how records of a dataset's ``spec`` decode.

    Attributes:
        spec: the dataset's spec as bound (what ``ds.spec`` gives).
        compiled: the compiled record reader may read records of this kind
            (:meth:`read_compiled`).
    """

    compiled = False

    def __init__(self, spec: Any) -> None:
        self.spec = spec

    @abstractmethod
    def decode(self, item: Located, transform: Callable | None) -> Any:
        """One record decoded, then ``transform`` applied; errors name the record.

        Raises:
            CorruptRecordError, FeatureError: a bad record (located).
        """

    @abstractmethod
    def begin_batch(self, batch: RecordBatch, run: BatchRun) -> Pending[Any]:
        """A batch's decoding, started (images decode on the engine's threads
        meanwhile); the result is the batch, or SKIPPED when the policy left
        out every record. Errors, and their reports, come from the result."""

    def read_compiled(self, fd: int, index: np.ndarray, r: int, verify: bool) -> Any:
        """Record ``r`` of the open shard ``fd`` read, checked and decoded by
        the compiled reader; None where it leaves the record to :meth:`decode`
        (which raises the error that names a bad one). Kinds the compiled
        reader cannot read (``compiled`` False) leave every record."""
        return None

    def for_items(self, transform: Callable | None) -> RecordSpec:
        """This kind as random access decodes it with ``transform`` (see
        :class:`ExampleRecords`); other kinds are as they are."""
        return self

    def ahead(self) -> Callable[[Located], Any] | None:
        """What a decode thread of the per-sample path may run: a record to
        its value before the transform (errors located, as :meth:`decode`
        raises them), or None when its records decode on the iterating thread
        (cheap to decode, or a hook or draw that must keep their order)."""
        return None

    def per_sample(self, transform: Callable | None, options: ImageBatching | None) -> PerSample:
        """What the per-sample path decodes with. Only Example features hold
        images to fuse a crop into; ``options.decoder`` is refused elsewhere."""
        refuse_decoder(options, type(self.spec).__name__)
        return PerSample(self, transform)

    def example_features(self) -> dict:
        """The features= dict of Examples, for the batch image decoder; empty for other kinds."""
        return {}

    def shown(self) -> Any:
        """What ``features=`` shows in a dataset's ``repr``."""
        return sorted(self.spec)

    def hooks(self) -> dict[str, Callable]:
        """The callables of the spec a user gave, by the spelling of their argument."""
        return {}

    def check_images(self, images: bool | ImageBatching) -> None:
        """Refuse ``Batching(images=...)`` options that nothing would honour
        (the kinds that hold images, or may, take them)."""
        return None


def _raise_located(error: ExampleDecodeError | FeatureError, item: Located) -> NoReturn:
    """Raise ``error``, met decoding ``item``, with the record's location; a
    record that is a serialized tensor is named as one."""
    tensor = serialized_tensor(*item) if isinstance(error, FeatureError) else None
    if tensor is not None:
        raise tensor from tensor.__cause__
    raise locate(error, item) from error


def decode_or_skip(item: Located, record: RecordSpec, transform: Callable | None,
                   report: Callable | None) -> object:
    """``record.decode(item, transform)`` (the record's kind decodes it, errors
    naming its location), but with ``report`` a bad record is reported and
    SKIPPED."""
    if report is None:
        return record.decode(item, transform)
    try:
        return record.decode(item, transform)
    except (CorruptRecordError, FeatureError) as e:
        report(e)
        return SKIPPED


def _without_bad_records(kind: RecordSpec, batch: RecordBatch, run: BatchRun) -> Any:
    """A batch that did not parse or decode as a whole: its bad records found
    record by record (named; reported and left out, or raised, under the
    policy), then the others decoded as a batch."""
    good = [i for i in batch.items() if decode_or_skip(i, kind, None, run.policy.reporter()) is not SKIPPED]
    return kind.begin_batch(RecordBatch([i.payload for i in good], lambda: good, batch.number), run).result()


class ExampleRecords(RecordSpec):
    """Records that are ``tf.train.Example``s decoded with a dict of features.

    Args:
        spec: the bound features (name -> Feature).
        owned: the features read each key once, so a decoded tensor may take
            over the freshly parsed array instead of copying it (random
            access, :meth:`for_items`).
    """

    compiled = True

    def __init__(self, spec: dict, *, owned: bool = False) -> None:
        super().__init__(spec)
        self.owned = owned
        self.plan = item_plan(spec)  # numbers only: the compiled reader makes the tensors itself

    def decode(self, item: Located, transform: Callable | None) -> Any:
        return apply_transform(transform, self.decoded(item), item.path, item.offset, item.record)

    def decoded(self, item: Located) -> dict:
        """The record's features, before any transform; errors name the record."""
        try:
            return self._decoded(parse_example(item.payload), item.payload)
        except (ExampleDecodeError, FeatureError) as e:
            _raise_located(e, item)

    def ahead(self) -> Callable[[Located], Any] | None:
        """:meth:`decoded` when a feature is costly (an image) and each is one
        of this package's kinds that draws nothing."""
        features = list(self.spec.values())
        ours = all(type(f).__module__.startswith("tfrecord_torch.") and not f.draws for f in features)
        return self.decoded if ours and any(f.costly for f in features) else None

    def _decoded(self, parsed: dict, payload: bytes) -> dict:
        try:
            return decode_owned(parsed, self.spec) if self.owned else decode(parsed, self.spec)
        except FeatureError as e:
            hinted = hint_sequence_example(e, payload)
            if hinted is e:
                raise
            raise hinted from e

    def begin_batch(self, batch: RecordBatch, run: BatchRun) -> Pending[Any]:
        """Parsed column-wise, images decoded into one buffer; a batch that
        does not parse or decode as a whole goes record by record."""
        if not batch.payloads:
            return Done(SKIPPED)
        try:
            columns = parse_example_batch(batch.payloads)
            pending = run.images.begin(columns, len(batch.payloads), batch.number)
        except (ExampleDecodeError, FeatureError):
            return Later(_without_bad_records, self, batch, run)
        except SizeMismatch as e:
            return Failed(mixed_sizes(e, batch.items()))
        return Later(self._end_batch, pending, batch, run)

    def _end_batch(self, pending: Pending[DecodedBatch], batch: RecordBatch, run: BatchRun) -> Any:
        """The batch once its images are decoded: the records whose image
        failed reported (or raised) and dropped."""
        size = len(batch.payloads)
        try:
            decoded, failures = pending.result()
        except SizeMismatch as e:
            raise mixed_sizes(e, batch.items()) from None
        if failures:
            located = batch.items()
            for i, error in sorted(failures.items()):
                run.policy.report(error.at(located[i].path, located[i].offset, located[i].record))
            if len(failures) == size:
                return SKIPPED
            decoded = drop_rows(decoded, set(failures), size)
        run.policy.delivered(size - len(failures))
        return run.images.finish(decoded)


    def read_compiled(self, fd: int, index: np.ndarray, r: int, verify: bool) -> Any:
        if self.plan is not None:
            return read_item(fd, index, r, verify, self.plan, torch.from_numpy)
        parsed = read_example(fd, index.item(r, 0), index.item(r, 1), verify)
        if parsed is None:
            return None
        try:
            return decode_owned(parsed, self.spec) if self.owned else decode(parsed, self.spec)
        except FeatureError:
            return None

    def for_items(self, transform: Callable | None) -> RecordSpec:
        """Images laid out for a v2 ``transform`` (:func:`laid_out_for`), and
        the parsed arrays taken over where each key is read once."""
        spec = laid_out_for(self.spec, transform) if is_v2_transform(transform) else self.spec
        return ExampleRecords(spec, owned=reads_once(spec))

    def per_sample(self, transform: Callable | None, options: ImageBatching | None) -> PerSample:
        """A fusable head of a v2 ``transform`` done while decoding (:func:`fuse_per_sample`)."""
        spec, rest = fuse_per_sample(self.spec, transform, options)
        return PerSample(ExampleRecords(spec), rest)

    def example_features(self) -> dict:
        return self.spec


class SequenceRecords(RecordSpec):
    """Records that are ``tf.train.SequenceExample``s: context features and
    feature lists. In batch mode each record decodes on its own, then the
    lists are padded along T (``pad_collate``)."""

    def decode(self, item: Located, transform: Callable | None) -> Any:
        try:
            parsed = self.spec.decode_payload(item.payload)
        except (ExampleDecodeError, FeatureError) as e:
            _raise_located(e, item)
        return apply_transform(transform, parsed, item.path, item.offset, item.record)

    def begin_batch(self, batch: RecordBatch, run: BatchRun) -> Pending[Any]:
        return Later(self._batch, batch, run)

    def _batch(self, batch: RecordBatch, run: BatchRun) -> Any:
        decoded = [r for r in (decode_or_skip(i, self, None, run.policy.reporter()) for i in batch.items())
                   if r is not SKIPPED]
        if not decoded:
            return SKIPPED
        run.policy.delivered(len(decoded))
        out = sequence_collate(decoded, tuple(self.spec.sequence))
        return run.transform(out) if run.transform is not None else out


class PayloadRecords(RecordSpec):
    """Records read as they are (``features=Payload(...)``): each one's
    bytes, or what the decode hook makes of them; a batch is the list of
    the items."""

    def decode(self, item: Located, transform: Callable | None) -> Any:
        got = self.spec.read(item.payload, item.path, item.offset, item.record)
        return apply_transform(transform, got, item.path, item.offset, item.record)

    def begin_batch(self, batch: RecordBatch, run: BatchRun) -> Pending[Any]:
        return Later(self._batch, batch, run)

    def _batch(self, batch: RecordBatch, run: BatchRun) -> Any:
        """The list of the items (a payload the hook fails on reported, or raised, and left out)."""
        hook = self.spec.decode
        if hook is None:
            out = list(batch.payloads)
        else:
            out, located = [], None
            for k, payload in enumerate(batch.payloads):
                try:
                    out.append(hook(payload))
                except Exception as e:  # a bad record: located, then under on_error
                    located = located or batch.items()
                    at = located[k]
                    error = self.spec.failed(e, at.path, at.offset, at.record)
                    error.__cause__ = e
                    run.policy.report(error)
        if not out:
            return SKIPPED
        run.policy.delivered(len(out))
        return run.transform(out) if run.transform is not None else out

    def shown(self) -> Any:
        return self.spec

    def hooks(self) -> dict[str, Callable]:
        return {"features=Payload(decode=...)": self.spec.decode}

    def check_images(self, images: bool | ImageBatching) -> None:
        """Image options for payloads, which hold no images to decode, are refused."""
        if isinstance(images, ImageBatching):
            raise ValueError(f"batching=Batching(images=ImageBatching(...)) sets how Image features decode, "
                             f"but features={self.spec!r} reads each record's payload as it is, with no "
                             "images to decode; leave images= out (or decode the images in the hook)")


class ParsedRecords(RecordSpec):
    """Records parsed but not decoded (no ``features=``): each Example's, or
    SequenceExample's, features and feature lists as their wire values."""

    compiled = True

    def __init__(self) -> None:
        super().__init__(None)

    def decode(self, item: Located, transform: Callable | None) -> Any:
        try:
            parsed = parse_record(item.payload)
            if not parsed:
                tensor = serialized_tensor(*item)
                if tensor is not None:
                    raise tensor
        except (ExampleDecodeError, FeatureError) as e:
            _raise_located(e, item)
        return apply_transform(transform, parsed, item.path, item.offset, item.record)

    def begin_batch(self, batch: RecordBatch, run: BatchRun) -> Pending[Any]:
        if not batch.payloads:
            return Done(SKIPPED)
        try:
            parsed = parse_record_batch(batch.payloads)
        except (ExampleDecodeError, FeatureError):
            return Later(_without_bad_records, self, batch, run)
        if not parsed:  # no features at all: empty Examples, or serialized tensors
            return Later(self._featureless, parsed, batch, run)
        run.policy.delivered(len(batch.payloads))
        return Later(run.transform, parsed) if run.transform is not None else Done(parsed)


    def _featureless(self, parsed: dict, batch: RecordBatch, run: BatchRun) -> Any:
        """A batch that holds no feature: its records that are serialized
        tensors, not Examples, reported (or raised); SKIPPED if all are."""
        located = batch.items()
        tensors = [e for e in (serialized_tensor(*i) for i in located) if e is not None]
        for error in tensors:
            run.policy.report(error)
        if len(tensors) == len(located):
            return SKIPPED
        run.policy.delivered(len(located) - len(tensors))
        return run.transform(parsed) if run.transform is not None else parsed

    def read_compiled(self, fd: int, index: np.ndarray, r: int, verify: bool) -> Any:
        # no features: the usual path tells an empty Example from a serialized tensor
        return read_example(fd, index.item(r, 0), index.item(r, 1), verify) or None

    def shown(self) -> Any:
        return None


def record_spec(spec: Any) -> RecordSpec:
    """The :class:`RecordSpec` of a dataset's bound ``spec`` (None, a dict,
    a SequenceSpec or a Payload): the one place that asks which kind it is."""
    if spec is None:
        return ParsedRecords()
    if isinstance(spec, Payload):
        return PayloadRecords(spec)
    if isinstance(spec, SequenceSpec):
        return SequenceRecords(spec)
    return ExampleRecords(spec)


class _Settings(NamedTuple):
    """The dataset's settings the per-sample path's decoding is worked out from."""

    spec: Any
    transform: Callable | None
    images: ImageBatching | None


class FusedPerSample:
    """:meth:`RecordSpec.per_sample` of a dataset's settings, worked out
    again only when ``spec``, ``transform`` or ``images`` is reassigned."""

    def __init__(self) -> None:
        self._fused: tuple[_Settings, PerSample] | None = None

    def of(self, spec: Any, transform: Callable | None, images: ImageBatching | None) -> PerSample:
        """The :class:`PerSample` of these settings (asked once a record: the
        same objects as last time are three identity checks)."""
        fused = self._fused
        if fused is not None:
            last = fused[0]
            if last.spec is spec and last.transform is transform and last.images is images:
                return fused[1]
        self._fused = (_Settings(spec, transform, images), record_spec(spec).per_sample(transform, images))
        return self._fused[1]


def mixed_sizes(e: SizeMismatch, located: list[Located]) -> MixedSizesError:
    """The error naming the first record whose value's shape differs from the
    batch's first (positions of ``e.shapes`` are those of ``located``)."""
    first = e.shapes[0]
    other = next(i for i, s in enumerate(e.shapes) if s != first)

    def where(i: int) -> str:
        shape = e.shapes[i]
        size = "no value" if shape is None else "x".join(map(str, shape))
        return f"{located[i].path}: record {located[i].record} at byte offset {located[i].offset} ({size})"

    return MixedSizesError(
        f"feature {e.key!r} ('{e.name}') differs in size within one batch -- {where(0)}, but {where(other)} -- "
        f"and in batch mode images and masks come as one tensor [B, ...]: {e.hint}")
