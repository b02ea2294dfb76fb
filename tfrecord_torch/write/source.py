"""Rebuilding a source dataset in another process: a picklable recipe.

A conversion's tasks run in other processes, maybe on other machines. They
receive a :class:`DatasetSource` -- a factory (a class or an importable
function) and its arguments -- and build the dataset once per process. What
they must not receive is the dataset itself: CIFAR10 holds its 150 MB of
pixels, ImageFolder a list of every file.

- A torchvision dataset given as an instance is turned into a recipe by its
  class and the constructor arguments it keeps as attributes (``root``,
  ``train``, ``split``, ``transform``, ``size``, ...).
- Any other dataset: give ``DatasetSource(MyDataset, *args, **kwargs)``, with
  ``MyDataset`` importable where the tasks run and picklable arguments, or
  make the dataset itself small and picklable (it is then sent with every
  task, which is fine for a dataset holding a few paths).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import pickle
import threading
from typing import Any

from tfrecord_torch.io import files as fs

__all__ = ["DatasetSource", "describe", "recipe_of", "source_of"]

log = logging.getLogger(__name__)
_LARGE = 8 << 20  # a pickled dataset larger than this is sent with every task: say so
_lock = threading.Lock()
_built: dict[str, Any] = {}  # recipe digest -> dataset; one entry: a process converts one source at a time


class DatasetSource:
    """A picklable recipe for a dataset: ``factory(*args, **kwargs)``.

    Args:
        factory: a class or function importable by name where the tasks run
            (module-level, not a lambda or a class defined in ``__main__``
            unless the workers can import it).
        *args: its positional arguments, picklable.
        **kwargs: its keyword arguments, picklable.

    Example:
        >>> source = DatasetSource(torchvision.datasets.CIFAR10, "/data", train=True)
        >>> write_dataset(source, "s3://bucket/cifar10", name="cifar10", executor=client.get_executor())
    """

    def __init__(self, factory: Any, /, *args: Any, **kwargs: Any) -> None:
        if not callable(factory):
            raise TypeError(f"factory must be a class or a function, got {type(factory).__name__}")
        self.factory, self.args, self.kwargs = factory, args, kwargs

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"DatasetSource({getattr(self.factory, '__qualname__', self.factory)}, {', '.join(parts)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DatasetSource) and (self.factory, self.args, self.kwargs) == \
            (other.factory, other.args, other.kwargs)

    __hash__ = None  # type: ignore[assignment]  # arguments may be unhashable

    def build(self) -> Any:
        """The dataset, built at most once per process for equal recipes."""
        try:
            key = hashlib.sha256(pickle.dumps(self)).hexdigest()
        except Exception:  # unpicklable here (a lambda under cloudpickle): build every time
            return self.factory(*self.args, **self.kwargs)
        with _lock:
            if key not in _built:
                _built.clear()
                _built[key] = self.factory(*self.args, **self.kwargs)
            return _built[key]


class _Given(DatasetSource):
    """A dataset sent as it is (small and picklable)."""

    def __init__(self, dataset: Any) -> None:
        super().__init__(_identity, dataset)

    def __repr__(self) -> str:
        return f"<the {type(self.args[0]).__name__} dataset, pickled>"


def _identity(dataset: Any) -> Any:
    return dataset


def source_of(dataset: Any) -> DatasetSource:
    """A picklable recipe that rebuilds ``dataset`` in another process.

    Raises:
        ValueError: no recipe is known and the dataset cannot be pickled.
    """
    recipe = recipe_of(dataset) or _Given(dataset)
    try:
        size = len(pickle.dumps(recipe))
    except Exception as e:
        raise ValueError(
            f"write_dataset sends the source to other processes, but {recipe!r} cannot be pickled ({e}). "
            "Give DatasetSource(cls, *args, **kwargs) with an importable class and picklable arguments, "
            "or use num_workers instead of executor=") from e
    if isinstance(recipe, _Given) and size > _LARGE:
        log.warning("%s pickles to %.0f MB, sent with every shard task; a DatasetSource(cls, *args, **kwargs) "
                    "that rebuilds it would be lighter", type(dataset).__name__, size / 2 ** 20)
    return recipe


def recipe_of(dataset: Any) -> DatasetSource | None:
    """The recipe of a :class:`DatasetSource` or a torchvision dataset, else None."""
    if isinstance(dataset, DatasetSource):
        return dataset
    return _torchvision_recipe(dataset)


def _torchvision_recipe(dataset: Any) -> DatasetSource | None:
    """``DatasetSource(type(dataset), **kept arguments)`` for a torchvision dataset, if all are kept."""
    cls = type(dataset)
    if not cls.__module__.startswith("torchvision.datasets."):
        return None
    kwargs: dict[str, Any] = {}
    for name, param in inspect.signature(cls).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name == "download":
            continue
        if hasattr(dataset, name):
            kwargs[name] = getattr(dataset, name)
        elif param.default is param.empty:
            return None
    if kwargs.get("transform") is not None or kwargs.get("target_transform") is not None:
        kwargs.pop("transforms", None)  # VisionDataset derives it from these two
    elif kwargs.get("transforms") is None:
        kwargs.pop("transforms", None)
    root = kwargs.get("root")
    if isinstance(root, (str, os.PathLike)) and not fs.is_url(os.fspath(root)):
        kwargs["root"] = os.path.abspath(os.fspath(root))  # tasks may run in another folder
    return DatasetSource(cls, **kwargs)


def describe(value: Any, depth: int = 0) -> Any:
    """A JSON-able description of a recipe's arguments, stable between runs
    (objects other than plain values are named by type, never by address)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > 4:
        return type(value).__qualname__
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [describe(v, depth + 1) for v in value][:64]
    if isinstance(value, dict):
        return {str(k): describe(v, depth + 1) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, DatasetSource):
        return {"factory": f"{getattr(value.factory, '__module__', '')}."
                           f"{getattr(value.factory, '__qualname__', type(value.factory).__qualname__)}",
                "args": describe(list(value.args), depth + 1), "kwargs": describe(value.kwargs, depth + 1)}
    return f"{type(value).__module__}.{type(value).__qualname__}"
