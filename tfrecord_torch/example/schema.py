"""Summaries of the features found in records: kinds, lengths, a schema."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["FeatureStats", "SchemaReport", "kind_of"]

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
class SchemaReport:
    """Feature statistics gathered over many parsed Examples."""

    records: int = 0
    parsed: int = 0
    not_examples: int = 0
    features: dict = field(default_factory=dict)

    def add(self, features: dict) -> None:
        self.parsed += 1
        for key, value in features.items():
            self.features.setdefault(key, FeatureStats()).add(value)

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

    def as_dict(self) -> dict:
        return {
            "records": self.records,
            "parsed": self.parsed,
            "not_examples": self.not_examples,
            "features": {
                key: {"kind": s.kind, "present": s.count, "min_length": s.min_len,
                      "max_length": s.max_len, "fixed": self.fixed(key)}
                for key, s in sorted(self.features.items())
            },
        }
