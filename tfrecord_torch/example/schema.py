"""Summaries of the features found in records: kinds, lengths, a schema."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["FeatureStats", "ListStats", "SchemaReport", "kind_of"]

_TF_DTYPES = {"int64": "tf.int64", "float": "tf.float32", "bytes": "tf.string"}


def kind_of(value) -> str:
    """"int64", "float", "bytes" or "empty" for a decoded feature value."""
    if isinstance(value, np.ndarray):
        return "int64" if value.dtype == np.int64 else "float"
    return "bytes" if value else "empty"


@dataclass
class FeatureStats:
    kinds: set = field(default_factory=set)
    count: int = 0  # records holding the key
    min_len: int | None = None
    max_len: int = 0

    def add(self, value) -> None:
        kind = kind_of(value)
        if kind != "empty":
            self.kinds.add(kind)
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

    def add(self, steps: list) -> None:
        self.steps.add(steps)
        for step in steps:
            self.width.add(step)

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
    features: dict = field(default_factory=dict)
    lists: dict = field(default_factory=dict)

    def add(self, features: dict, lists: dict | None = None) -> None:
        """Count one record: its features (a SequenceExample's context) and
        its feature lists, if any."""
        self.parsed += 1
        for key, value in features.items():
            self.features.setdefault(key, FeatureStats()).add(value)
        for key, steps in (lists or {}).items():
            self.lists.setdefault(key, ListStats()).add(steps)

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
                lines.append(f"    {key!r}: tf.io.FixedLenFeature([{shape}], {dtype}),")
            else:
                lines.append(f"    {key!r}: tf.io.VarLenFeature({dtype}),")
        lines.append("}")
        return "\n".join(lines)

    def torch_spec(self) -> str:
        """The matching ``tfrecord_torch`` spec (Python source)."""
        classes = {"int64": "Int64", "float": "Float"}
        lines = ["{"]
        for key in sorted(self.features):
            s = self.features[key]
            if s.kind not in ("int64", "float", "bytes"):
                lines.append(f"    # {key!r}: {s.kind} kind, no single dtype")
            elif s.kind == "bytes":
                many = "" if self.fixed(key) and s.max_len == 1 else "many=True"
                lines.append(f"    {key!r}: Bytes({many}),")
            elif self.fixed(key):
                shape = "" if s.max_len == 1 else f"shape=({s.max_len},)"
                lines.append(f"    {key!r}: {classes[s.kind]}({shape}),")
            else:
                lines.append(f"    {key!r}: {classes[s.kind]}(shape=None),")
        lines.append("}")
        return "\n".join(lines)

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
            if s.fixed_width is None:  # steps of different widths: one row per step
                lists.append(f"    {key!r}: tf.io.VarLenFeature({_TF_DTYPES[s.kind]}),")
                continue
            shape = "" if s.fixed_width == 1 else str(s.fixed_width)
            missing = ", allow_missing=True" if s.steps.count < self.parsed else ""
            lists.append(f"    {key!r}: tf.io.FixedLenSequenceFeature([{shape}], {_TF_DTYPES[s.kind]}{missing}),")
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
            lists.append(f"    {key!r}: {name}({', '.join(options)}),")
        lists.append("}")
        context = self.torch_spec() if self.features else "None"
        return "features = " + context + "\n" + "\n".join(lists)

    def as_dict(self) -> dict:
        out = {
            "records": self.records,
            "parsed": self.parsed,
            "not_examples": self.not_examples,
            "features": {
                key: {"kind": s.kind, "present": s.count, "min_length": s.min_len,
                      "max_length": s.max_len, "fixed": self.fixed(key)}
                for key, s in sorted(self.features.items())
            },
        }
        if self.lists:
            out["feature_lists"] = {
                key: {"kind": s.kind, "present": s.steps.count, "min_steps": s.steps.min_len,
                      "max_steps": s.steps.max_len, "min_width": s.width.min_len, "max_width": s.width.max_len,
                      "fixed_width": s.fixed_width is not None}
                for key, s in sorted(self.lists.items())
            }
        return out
