"""Lazily exported names for a package's ``__init__`` (PEP 562).

A package's face lists its public names and the module defining each; a
name's module is imported the first time the name is used, so importing the
package (or any module inside it) imports nothing else -- ``import
tfrecord_torch`` stays free of torch, and a subpackage's ``__init__`` never
imports the modules that import it back.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str], modules: Mapping[str, str] | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package: the package's ``__name__``.
        exports: public name -> the module that defines it.
        modules: public name -> a module exported as itself.
    """
    modules = dict(modules or {})

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
        elif name in modules:
            value = importlib.import_module(modules[name])
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports, *modules})

    return __getattr__, __dir__
