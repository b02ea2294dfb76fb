"""Argument checks shared by every constructor, so one mistake gets one error.

A bottom layer (imports nothing of ours, nor torch): the datasets, the
option objects and the writers all check their arguments here. ``True`` is
an ``int`` to Python but never a count here: ``batch_size=True`` is refused
as ``shuffle_block=True`` is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["check_choice", "check_flag", "check_instance", "check_int", "moved_keywords", "refuse_moved"]

F = TypeVar("F", bound=Callable[..., Any])


def check_int(name: str, value: Any, *, minimum: int = 0, maximum: int | None = None,
              optional: bool = False) -> Any:
    """``value`` if it is an int (not a bool) in [minimum, maximum], or None when ``optional``.

    Raises:
        ValueError: naming ``name``, the range and the value given.
    """
    if value is None and optional:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum and \
            (maximum is None or value <= maximum):
        return value
    if maximum is not None:
        wanted = f"an int in [{minimum}, {maximum}]"
    else:
        wanted = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    raise ValueError(f"{name} must be {wanted}{' or None' if optional else ''}, got {value!r}")


def check_flag(name: str, value: Any, *, optional: bool = False) -> Any:
    """``value`` if it is True or False (or None when ``optional``).

    Raises:
        ValueError: naming ``name`` and the value given.
    """
    if isinstance(value, bool) or (value is None and optional):
        return value
    raise ValueError(f"{name} must be True or False{', or None' if optional else ''}, got {value!r}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices``.

    Raises:
        ValueError: naming ``name`` and listing the valid values.
    """
    choices = tuple(choices)
    if any(value is c or (type(value) is type(c) and value == c) for c in choices):
        return value
    raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_instance(name: str, value: Any, types: type | tuple[type, ...], wanted: str) -> Any:
    """``value`` if it is an instance of ``types`` (``wanted`` says which, for the message).

    Raises:
        TypeError: naming ``name``, what it must be and what was given.
    """
    if isinstance(value, types):
        return value
    raise TypeError(f"{name} must be {wanted}, got {type(value).__name__} {value!r:.80}")


def refuse_moved(owner: str, given: Mapping[str, Any], moved: Mapping[str, tuple[str, str]]) -> None:
    """Raise for keywords that moved into an option object, naming the new spelling.

    Args:
        owner: the function or class, for the message.
        given: the unexpected keyword arguments received.
        moved: old keyword -> (new keyword, option class and its field), e.g.
            ``{"shuffle_block": ("shuffle", "Shuffling(block={})")}``.

    Raises:
        TypeError: for the first moved keyword (with its value in the new
            spelling), or for an unknown one, as Python would.
    """
    for key, value in given.items():
        if key in moved:
            new, template = moved[key]
            raise TypeError(f"{owner}(): {key}= moved: use {new}={template.format(value=value)!s}")
    if given:
        raise TypeError(f"{owner}() got an unexpected keyword argument {next(iter(given))!r}")


def moved_keywords(moved: Mapping[str, tuple[str, str]]) -> Callable[[F], F]:
    """A decorator: calls with a keyword of ``moved`` raise :func:`refuse_moved`'s
    TypeError; the function's own signature stays as it is."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            old = {k: v for k, v in kwargs.items() if k in moved}
            if old:
                refuse_moved(fn.__name__, old, moved)
            return fn(*args, **kwargs)
        return wrapper  # type: ignore[return-value]
    return decorate
