"""How many bytes a read asks for first, and how its reads grow after: one value.

Three reads start small and double: an iteration's first reads (the first
group's records cut into reads of 1, 2, 4 MiB ...), an in-order read's
windows, and a shard-cache fill's first ranges. They start from the same
number on purpose: a reader following a fill waits for the fill's first
range and no more, and a first read that runs ahead of the fill by more than
that goes to the bucket instead of waiting. So the number, and the rule,
live here once (:class:`ReadBudget`, :meth:`ReadBudget.ramp`), and each
reader is handed the value rather than reading a module constant.

A dataset takes its budget from ``Source(read_budget=...)``; its read
session hands it to the readers, the windows and the copies' fills.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

__all__ = ["DEFAULT", "ReadBudget"]

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class ReadBudget:
    """The byte budgets of an iteration's reads (TFDS's ``ReadConfig`` for bytes).

    Attributes:
        first: bytes of an iteration's first read, of an in-order read's
            first window and of a shard-cache fill's first range; each next
            one twice the one before (:meth:`ramp`). Also how far past what a
            fill has written an iteration's first reads wait for it (further
            records come from the bucket). Smaller: the first records sooner;
            larger: fewer requests on a bucket far away.
        early: the reads of a shuffled iteration that begin before it has
            read this many bytes are its early ones (they wait for no fill's
            later ranges).
        window: the longest window of an in-order read of a local file or a
            complete copy (a URL's windows are at most one request long).
    """

    first: int = 1 * MiB
    early: int = 4 * MiB
    window: int = 16 * MiB

    def __post_init__(self) -> None:
        for name in ("first", "early", "window"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ReadBudget({name}={value!r}): a number of bytes >= 1 is needed")

    def ramp(self, longest: int | None = None) -> Iterator[int]:
        """The sizes of reads that start small and double: :attr:`first`,
        then each twice the one before, each at most ``longest`` (None: no
        bound); endless (the caller stops when its bytes are covered)."""
        step = self.first if longest is None else min(self.first, longest)
        while True:
            yield step
            step = 2 * step if longest is None else min(2 * step, longest)


DEFAULT = ReadBudget()
"""The budget of a dataset given none (the value, not a knob: pass another)."""
