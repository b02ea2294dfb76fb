"""Deferred results: work started now, its value taken later with ``.result()``.

The batch path overlaps work: a batch's images decode on threads while the
next batch is read. What is started hands back a :class:`Pending` -- as
``concurrent.futures.Future`` does -- and the caller asks for its value when
it needs it. :class:`Done` is a value already computed, :class:`Later` a
call made only when the result is asked for, :class:`Failed` an error raised
then; work running elsewhere subclasses :class:`Pending` and implements
:meth:`~Pending.result`.

A result is asked for once: unlike a Future, a Pending does not keep its
value, so a :class:`Later` runs its call again if asked twice.
(The bottom layer: imports nothing of ours.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NoReturn, TypeVar

__all__ = ["Done", "Failed", "Later", "Pending"]

T_co = TypeVar("T_co", covariant=True)


class Pending(Generic[T_co]):
    """A result that may not be computed yet; :meth:`result` gives it (or
    raises the error computing it raised)."""

    __slots__ = ()

    def result(self) -> T_co:
        raise NotImplementedError


class Done(Pending[T_co]):
    """A value already computed."""

    __slots__ = ("value",)

    def __init__(self, value: T_co) -> None:
        self.value = value

    def result(self) -> T_co:
        return self.value

    def __repr__(self) -> str:
        return f"Done({self.value!r})"


class Later(Pending[T_co]):
    """``function(*args)``, called when the result is asked for (on the
    asking thread), so its errors come in the order results are taken."""

    __slots__ = ("args", "function")

    def __init__(self, function: Callable[..., T_co], *args: Any) -> None:
        self.function, self.args = function, args

    def result(self) -> T_co:
        return self.function(*self.args)

    def __repr__(self) -> str:
        return f"Later({getattr(self.function, '__qualname__', self.function)!r})"


class Failed(Pending[Any]):
    """An error found while starting, raised when the result is asked for."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def result(self) -> NoReturn:
        raise self.error

    def __repr__(self) -> str:
        return f"Failed({self.error!r})"
