"""Summaries of the features found in records: kinds, lengths, what bytes
values hold, a schema.

What a bytes value holds (an encoded image, ...) is told by a *sniffer*, a
function ``bytes -> Content | None`` the caller hands to :class:`SchemaReport`
(the command line hands over its own); this layer knows no formats.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

__all__ = ["Content", "ContentStats", "FeatureStats", "ListStats", "SchemaReport", "kind_of", "spec_imports"]

_TF_DTYPES = {"int64": "tf.int64", "float": "tf.float32", "bytes": "tf.string"}


def kind_of(value) -> str:
    """"int64", "float", "bytes" or "empty" for a decoded feature value."""
    if isinstance(value, np.ndarray):
        return "int64" if value.dtype == np.int64 else "float"
    return "bytes" if value else "empty"


class Content(NamedTuple):
    """What one bytes value holds, as a sniffer recognises it.

    Attributes:
        name: the format, e.g. "JPEG".
        what: the plural noun for a report, e.g. "images".
        spec: the ``tfrecord_torch`` feature that decodes one such value
            (Python source, e.g. "Image()"), or None.
        size: (width, height) for an image whose header gives it, else None.
        tf_hint: how TensorFlow decodes it (e.g. "tf.io.decode_image"), or None.
    """

    name: str
    what: str
    spec: str | None = None
    size: tuple[int, int] | None = None
    tf_hint: str | None = None


Sniffer = Callable[[bytes], "Content | None"]


@dataclass
class ContentStats:
    """What the bytes values of one feature hold: counts per format, byte
    sizes and (for images) the smallest and largest size in pixels."""

    formats: dict = field(default_factory=dict)  # name -> values
    recognised: int = 0
    unrecognised: int = 0
    specs: set = field(default_factory=set)
    whats: set = field(default_factory=set)
    tf_hints: set = field(default_factory=set)
    min_bytes: int | None = None
    max_bytes: int = 0
    smallest: tuple[int, int] | None = None
    largest: tuple[int, int] | None = None

    def add(self, value: bytes, sniff: Sniffer) -> None:
        found = sniff(value)
        if found is None:
            self.unrecognised += 1
            return
        self.recognised += 1
        self.formats[found.name] = self.formats.get(found.name, 0) + 1
        self.specs.add(found.spec)
        self.whats.add(found.what)
        self.tf_hints.add(found.tf_hint)
        n = len(value)
        self.min_bytes = n if self.min_bytes is None else min(self.min_bytes, n)
        self.max_bytes = max(self.max_bytes, n)
        if found.size is not None:
            area = found.size[0] * found.size[1]
            if self.smallest is None or area < self.smallest[0] * self.smallest[1]:
                self.smallest = found.size
            if self.largest is None or area > self.largest[0] * self.largest[1]:
                self.largest = found.size

    @property
    def uniform(self) -> bool:
        """Every value recognised, all with one spec."""
        return self.recognised > 0 and not self.unrecognised and len(self.specs) == 1

    @property
    def spec(self) -> str | None:
        return next(iter(self.specs)) if self.uniform else None

    def summary(self) -> str:
        """E.g. "JPEG images, 1.2-8.1 KB, 20x30-64x48"; "" when nothing was recognised."""
        if not self.recognised:
            return ""
        names = "+".join(sorted(self.formats, key=lambda k: (-self.formats[k], k)))
        what = next(iter(self.whats)) if len(self.whats) == 1 else "values"
        mixed = " (mixed formats)" if len(self.formats) > 1 else ""
        parts = [f"{names} {what}{mixed}", _span_bytes(self.min_bytes or 0, self.max_bytes)]
        if self.smallest is not None and self.largest is not None:
            small, large = (f"{w}x{h}" for w, h in (self.smallest, self.largest))
            parts.append(small if small == large else f"{small}-{large}")
        if self.unrecognised:
            parts.append(f"{self.recognised} of {self.recognised + self.unrecognised} values")
        return ", ".join(parts)

    def as_dict(self) -> dict:
        return {"formats": dict(sorted(self.formats.items())), "recognised": self.recognised,
                "unrecognised": self.unrecognised, "min_bytes": self.min_bytes, "max_bytes": self.max_bytes,
                "smallest": list(self.smallest) if self.smallest else None,
                "largest": list(self.largest) if self.largest else None, "spec": self.spec}


def _tf_note(content: ContentStats) -> str:
    """A trailing comment on a TF description line: what the values hold and how TF decodes them."""
    if not content.recognised:
        return ""
    hint = next(iter(content.tf_hints)) if content.uniform and len(content.tf_hints) == 1 else None
    return f"  # {content.summary()}" + (f"; decode with {hint}" if hint else "")


_SPEC_NAME = re.compile(r"(?<![\w.])([A-Z]\w*|tfspec)[.(]")
_NOTE = re.compile(r"\s+# .*$")  # a spec line's trailing comment (its summary), which may name formats


def spec_imports(*sources: str) -> str:
    """``from tfrecord_torch import ...`` for the names a printed spec uses."""
    names = sorted({m for text in sources for line in text.splitlines()
                    for m in _SPEC_NAME.findall(_NOTE.sub("", line))})
    return f"from tfrecord_torch import {', '.join(names)}" if names else ""


def _span_bytes(low: int, high: int) -> str:
    def unit(n: int) -> tuple[float, str]:
        for size, name in ((1 << 20, "MB"), (1 << 10, "KB")):
            if n >= size:
                return n / size, name
        return n, "B"

    def text(n: int) -> tuple[str, str]:
        value, name = unit(n)
        return (f"{value:.0f}" if name == "B" else f"{value:.1f}"), name

    (a, ua), (b, ub) = text(low), text(high)
    if (a, ua) == (b, ub):
        return f"{a} {ua}"
    return f"{a}-{b} {ub}" if ua == ub else f"{a} {ua}-{b} {ub}"


@dataclass
class FeatureStats:
    kinds: set = field(default_factory=set)
    count: int = 0  # records holding the key
    min_len: int | None = None
    max_len: int = 0
    content: ContentStats = field(default_factory=ContentStats)

    def add(self, value, sniff: Sniffer | None = None) -> None:
        kind = kind_of(value)
        if kind != "empty":
            self.kinds.add(kind)
        if kind == "bytes" and sniff is not None:
            for item in value:
                self.content.add(item, sniff)
        n = len(value)
        self.count += 1
        self.min_len = n if self.min_len is None else min(self.min_len, n)
        self.max_len = max(self.max_len, n)

    @property
    def kind(self) -> str:
        if not self.kinds:
            return "empty"
        return next(iter(self.kinds)) if len(self.kinds) == 1 else "mixed"


@dataclass
class ListStats:
    """One feature list of SequenceExamples: its kind, its steps per record,
    and the values per step (its width)."""

    steps: FeatureStats = field(default_factory=FeatureStats)  # lengths: steps per record
    width: FeatureStats = field(default_factory=FeatureStats)  # lengths: values per step

    def add(self, steps: list, sniff: Sniffer | None = None) -> None:
        self.steps.add(steps)
        for step in steps:
            self.width.add(step, sniff)

    @property
    def kind(self) -> str:
        return self.width.kind

    @property
    def fixed_width(self) -> int | None:
        """The values every step holds, None if they differ (or no step was seen)."""
        w = self.width
        return w.max_len if w.count and w.min_len == w.max_len else None


@dataclass
class SchemaReport:
    """Feature statistics gathered over many parsed Examples (or
    SequenceExamples: context features in ``features``, feature lists in
    ``lists``)."""

    records: int = 0
    parsed: int = 0
    not_examples: int = 0
    serialized_tensors: int = 0  # records that are tf.io.serialize_tensor's TensorProtos, not Examples
    features: dict = field(default_factory=dict)
    lists: dict = field(default_factory=dict)
    sniff: Sniffer | None = None  # tells what bytes values hold (see Content)

    def add(self, features: dict, lists: dict | None = None) -> None:
        """Count one record: its features (a SequenceExample's context) and
        its feature lists, if any."""
        self.parsed += 1
        for key, value in features.items():
            self.features.setdefault(key, FeatureStats()).add(value, self.sniff)
        for key, steps in (lists or {}).items():
            self.lists.setdefault(key, ListStats()).add(steps, self.sniff)

    def fixed(self, key: str) -> bool:
        """True if every parsed record holds the key with the same length."""
        s = self.features[key]
        return s.count == self.parsed and s.min_len == s.max_len

    def feature_description(self) -> str:
        """The inferred schema as a tf.io ``feature_description`` (Python source)."""
        lines = ["{"]
        for key in sorted(self.features):
            s = self.features[key]
            dtype = _TF_DTYPES.get(s.kind)
            if dtype is None:
                lines.append(f"    # {key!r}: {s.kind} kind, no single dtype")
            elif self.fixed(key):
                shape = "" if s.max_len == 1 else str(s.max_len)  # a scalar is [] (TF's [1] gives shape [1])
                lines.append(f"    {key!r}: tf.io.FixedLenFeature([{shape}], {dtype}),{_tf_note(s.content)}")
            else:
                lines.append(f"    {key!r}: tf.io.VarLenFeature({dtype}),{_tf_note(s.content)}")
        lines.append("}")
        return "\n".join(lines)

    def torch_spec(self) -> str:
        """The matching ``tfrecord_torch`` spec (Python source)."""
        classes = {"int64": "Int64", "float": "Float"}
        lines = ["{"]
        for key in sorted(self.features):
            s = self.features[key]
            # TF's VarLenFeature gives an empty tensor where a record lacks the key: so does default=[]
            empty = ", default=[]" if s.count < self.parsed else ""
            if s.kind not in ("int64", "float", "bytes"):
                lines.append(f"    # {key!r}: {s.kind} kind, no single dtype")
            elif s.kind == "bytes":
                lines.append(self._bytes_spec(key, s))
            elif self.fixed(key):
                shape = "" if s.max_len == 1 else f"shape=({s.max_len},)"
                lines.append(f"    {key!r}: {classes[s.kind]}({shape}),")
            else:
                lines.append(f"    {key!r}: {classes[s.kind]}(shape=None{empty}),")
        lines.append("}")
        return "\n".join(lines)

    def _bytes_spec(self, key: str, s: FeatureStats) -> str:
        """The spec line of bytes feature ``key``: the sniffed spec (e.g.
        ``Image()``) for one value per record, else ``Bytes``."""
        note = f"  # {s.content.summary()}" if s.content.recognised else ""
        spec = s.content.spec
        if spec is not None and s.min_len == s.max_len == 1:  # one value in every record holding it
            if s.count < self.parsed:  # some records lack it: None there
                spec = spec[:-1] + ("default=None)" if spec.endswith("()") else ", default=None)")
            return f"    {key!r}: {spec},{note}"
        if self.fixed(key) and s.max_len == 1:
            return f"    {key!r}: Bytes(),{note}"
        empty = ", default=[]" if s.count < self.parsed else ""
        return f"    {key!r}: Bytes(many=True{empty}),{note}"

    def _list_problem(self, key: str) -> str | None:
        """Why feature list ``key`` has no fixed-shape spec, or None."""
        s = self.lists[key]
        if s.kind not in ("int64", "float", "bytes"):
            return f"steps of {s.kind} kind" if s.width.count else "no steps seen: kind unknown"
        return None

    def sequence_description(self) -> str:
        """The inferred schema as ``tf.io.parse_single_sequence_example``'s
        ``context_features`` and ``sequence_features`` (Python source)."""
        lists = ["sequence_features = {"]
        for key in sorted(self.lists):
            s, problem = self.lists[key], self._list_problem(key)
            if problem is not None:
                lists.append(f"    # {key!r}: {problem}")
                continue
            note = _tf_note(s.width.content)
            if s.fixed_width is None:  # steps of different widths: one row per step
                lists.append(f"    {key!r}: tf.io.VarLenFeature({_TF_DTYPES[s.kind]}),{note}")
                continue
            shape = "" if s.fixed_width == 1 else str(s.fixed_width)
            missing = ", allow_missing=True" if s.steps.count < self.parsed else ""
            lists.append(f"    {key!r}: tf.io.FixedLenSequenceFeature([{shape}], {_TF_DTYPES[s.kind]}{missing}),"
                         f"{note}")
        lists.append("}")
        return "context_features = " + self.feature_description() + "\n" + "\n".join(lists)

    def sequence_spec(self) -> str:
        """The matching ``tfrecord_torch`` specs, ``features=`` (the context)
        and ``sequence_features=`` (Python source)."""
        classes = {"int64": "Int64", "float": "Float"}
        lists = ["sequence_features = {"]
        for key in sorted(self.lists):
            s, problem = self.lists[key], self._list_problem(key)
            if problem is not None:
                lists.append(f"    # {key!r}: {problem}")
                continue
            options = []
            if s.fixed_width is None:  # steps of different widths: a list of rows, as TF's VarLenFeature
                dtype = {"int64": "int64", "float": "float32", "bytes": "string"}[s.kind]
                lists.append(f"    {key!r}: tfspec.VarLenFeature({dtype!r}),")
                continue
            if s.kind == "bytes":
                name = "Bytes"
                if s.fixed_width != 1:
                    options.append("many=True")
            else:
                name = classes[s.kind]
                if s.fixed_width != 1:
                    options.append(f"shape=({s.fixed_width},)")
            if s.steps.count < self.parsed:  # some records lack the list: empty there
                options.append("default=None")
            note = f"  # {s.width.content.summary()}" if s.width.content.recognised else ""
            lists.append(f"    {key!r}: {name}({', '.join(options)}),{note}")
        lists.append("}")
        context = self.torch_spec() if self.features else "None"
        return "features = " + context + "\n" + "\n".join(lists)

    def as_dict(self) -> dict:
        out = {
            "records": self.records,
            "parsed": self.parsed,
            "not_examples": self.not_examples,
            "serialized_tensors": self.serialized_tensors,
            "features": {
                key: {"kind": s.kind, "present": s.count, "min_length": s.min_len,
                      "max_length": s.max_len, "fixed": self.fixed(key),
                      **({"content": s.content.as_dict()} if s.content.recognised else {})}
                for key, s in sorted(self.features.items())
            },
        }
        if self.lists:
            out["feature_lists"] = {
                key: {"kind": s.kind, "present": s.steps.count, "min_steps": s.steps.min_len,
                      "max_steps": s.steps.max_len, "min_width": s.width.min_len, "max_width": s.width.max_len,
                      "fixed_width": s.fixed_width is not None,
                      **({"content": s.width.content.as_dict()} if s.width.content.recognised else {})}
                for key, s in sorted(self.lists.items())
            }
        return out
