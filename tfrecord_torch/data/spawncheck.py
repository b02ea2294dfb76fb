"""A dataset pickled for a DataLoader worker: the callables it was given must pickle.

Under the ``spawn`` and ``forkserver`` start methods (the default on macOS and
Windows, and on Linux from Python 3.14; or ``multiprocessing_context=``)
DataLoader pickles the dataset into each worker. A lambda, or a function
defined inside another function, does not pickle, and what torch shows then
(``AttributeError: Can't pickle local object 'main.<locals>.<lambda>'`` and a
warning about start methods) names neither the dataset's argument nor the fix.

A dataset's ``__getstate__`` puts a :class:`PickleCheck` first in its state.
Pickled, the check pickles the callables the user gave (``transform=``,
``features=`` with a ``Payload(decode=...)`` hook, a callable ``on_error=``)
before the pickler reaches them, and raises a ``PicklingError`` naming the
argument and the fix when one does not pickle (each is pickled twice, once
here: a transform is small). Copied (``copy.copy``, ``copy.deepcopy``, which
share functions rather than pickle them), the check is nothing, so a dataset
with a lambda copies as before.
"""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any

__all__ = ["PickleCheck", "user_callables", "with_check", "without_check"]

_KEY = "_pickle_check"


class _Discard:
    """A file that forgets what is written to it."""

    @staticmethod
    def write(data: Any) -> int:
        return len(data)


def _nothing() -> None:
    return None


def _pickle_error(value: Any) -> Exception | None:
    """Why ``value`` does not pickle, or None if it does (as multiprocessing pickles it)."""
    try:
        pickle.Pickler(_Discard(), pickle.HIGHEST_PROTOCOL).dump(value)
        return None
    except Exception as e:  # noqa: BLE001 - any failure to pickle is the user's to know
        try:  # the pickler spawn uses knows a few more types (connections, sockets, shared tensors)
            ForkingPickler(_Discard(), pickle.HIGHEST_PROTOCOL).dump(value)
            return None
        except Exception:  # noqa: BLE001
            return e


class PickleCheck:
    """Placed first in a dataset's pickled state: pickling it checks the
    user's callables. ``dataset`` is the dataset class's name; ``arguments``
    maps each argument's spelling (``"transform="``) to its value."""

    __slots__ = ("arguments", "dataset")

    def __init__(self, dataset: str, arguments: dict[str, Any]) -> None:
        self.dataset = dataset
        self.arguments = {k: v for k, v in arguments.items() if v is not None}

    def __reduce__(self):
        for argument, value in self.arguments.items():
            error = _pickle_error(value)
            if error is not None:
                raise pickle.PicklingError(_explain(self.dataset, argument, value, error)) from error
        return (_nothing, ())

    def __copy__(self) -> None:
        return None

    def __deepcopy__(self, memo: dict) -> None:
        return None


def _explain(dataset: str, argument: str, value: Any, error: Exception) -> str:
    name = getattr(value, "__qualname__", None) or type(value).__name__
    return (f"{dataset}'s {argument} ({name}) does not pickle ({type(error).__name__}: {error}), and "
            f"DataLoader pickles the dataset to start each worker under the 'spawn' or 'forkserver' start "
            f"method (the default on macOS and Windows, and on Linux from Python 3.14). A lambda, or a "
            f"function defined inside another function, cannot be pickled: define the function with `def` "
            f"at the top level of a module (or of your script) and pass that, binding any arguments with "
            f"functools.partial(function, ...); an instance of a top-level class with a __call__ method "
            f"works too")


def user_callables(transform: Any, hooks: dict[str, Any], on_error: Any) -> dict[str, Any]:
    """The callables a dataset was given, by the spelling of their argument
    (``hooks``: the spec's own, :meth:`~tfrecord_torch.data.recordspec.RecordSpec.hooks`)."""
    return {"transform=": transform, **hooks, "on_error=": on_error if callable(on_error) else None}


def with_check(dataset: str, state: dict, arguments: dict[str, Any]) -> dict:
    """``state`` with a :class:`PickleCheck` of ``arguments`` first (a new dict)."""
    return {_KEY: PickleCheck(dataset, arguments), **state}


def without_check(state: dict) -> dict:
    """``state`` as ``__setstate__`` gets it, without the check's entry."""
    state.pop(_KEY, None)
    return state
