"""Descriptions written for the ``tfrecord`` package: ``{"image": "byte",
"label": "int", "x": "float"}``.

That package gives, for each key a record must hold: ``"byte"`` the bytes
(one value), ``"int"`` an int64 array ``[n]``, ``"float"`` a float32 array
``[n]``. The same values here are ``Bytes()``, ``Int64(shape=None)`` and
``Float(shape=None)``, as tensors; a ``"byte"`` key holding several values
is a FeatureError (that package gives an array of bytes), read it with
``Bytes(many=True)``.
"""

from __future__ import annotations

from typing import TypeGuard

from tfrecord_torch.features.specs import Bytes, Float, Int64

__all__ = ["KINDS", "from_kinds", "has_kinds"]

# the tfrecord package's kind -> (this package's feature, as it is written)
KINDS = {"byte": (Bytes, {}, "Bytes()"), "int": (Int64, {"shape": None}, "Int64(shape=None)"),
         "float": (Float, {"shape": None}, "Float(shape=None)")}
_MAPPING = ", ".join(f'"{kind}" -> {text}' for kind, (_, _, text) in KINDS.items())


def has_kinds(spec: object) -> TypeGuard[dict]:
    """True for a dict with a string value (a ``tfrecord`` package kind)."""
    return isinstance(spec, dict) and any(isinstance(v, str) for v in spec.values())


def from_kinds(spec: dict, *, argument: str = "features") -> dict:
    """``spec`` with each ``tfrecord`` package kind replaced by its feature.

    Raises:
        ValueError: an unknown kind (naming the key and the mapping), or kinds
            in ``sequence_features`` (that package gives a list of arrays
            per step; here a step's feature is one tensor row).
    """
    out = {}
    for name, kind in spec.items():
        if not isinstance(kind, str):
            out[name] = kind
            continue
        if argument != "features" or kind not in KINDS:
            raise ValueError(f"{argument}[{name!r}] = {kind!r}: give a Feature; the tfrecord package's kinds "
                             f"map as {_MAPPING}" + ("" if argument == "features" else
                                                     " (for sequence_features, one step's: Int64(), Float())"))
        feature, options, _ = KINDS[kind]
        out[name] = feature(**options)
    return out
