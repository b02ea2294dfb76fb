"""The registry: data sets, cases, contenders (workers) and targets.

A case module (``benchmarks/cases/*.py``) registers a data set with :func:`dataset`, a
case with :func:`case`, its contenders with :func:`worker` and its targets with
:func:`target`. A contender is a function ``make(path) -> run`` that does its imports and
set-up and returns ``run()``: one full pass over the data returning a tally dict
(``records`` and ``checksum``, optionally ``bytes``, ``pixels``), each checked against the
data set's; a pass that times itself adds ``seconds`` (and ``cpu_seconds``). A measure
case's ``run()`` returns ``value`` (and optionally ``detail``, ``samples``, and ``metrics``,
named numbers a target may check) instead.

Module level imports: the standard library only (workers may run in other interpreters).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
VENVS = os.environ.get("TFRECORD_BENCH_VENVS", os.path.join(HERE, "venvs"))

# unit -> (how the amount per pass is counted, format); None: a measured value (Case.measure)
UNITS = {
    "GB/s": ("bytes", "{:.2f}"),  # the data set's payload bytes / 1e9
    "MB/s": ("bytes_mb", "{:,.0f}"),  # the data set's payload bytes / 1e6
    "records/s": ("records", "{:,.0f}"),
    "images/s": ("records", "{:,.0f}"),
    "% RSS growth": (None, "{:+.1f}"),
    "s": (None, "{:.2f}"),  # a measured time (lower is better)
}


@dataclass
class Dataset:
    name: str
    build: Callable[[str, dict], dict]  # (path, params) -> expected tally
    full: dict
    quick: dict
    tiny: dict  # --tiny: the smoke test's sizes
    describe: Callable[[dict], str]
    folder: bool = False  # the builder writes a folder (DIR/data/NAME/), not NAME.tfrecord

    def params(self, size: str) -> dict:
        return {"full": self.full, "quick": self.quick, "tiny": self.tiny}[size]


@dataclass
class Impl:
    name: str
    make: Callable[[str], Callable[[], dict]]
    note: str
    ref: str | None = None  # the row its ratios compare with (default: the case's ref)
    python: str | None = None  # interpreter: a path, or a venv name under benchmarks/venvs
    yardstick: bool = False  # a ceiling or yardstick, not a peer (grey in the chart)


@dataclass(eq=False)  # hashable (by identity)
class Case:
    name: str
    dataset: str
    unit: str  # see UNITS
    repeats: int
    quick_repeats: int
    title: str
    probe: bool = True  # run the CRC probe (needs workers that read the small-Example schema)
    measure: bool = False  # run() returns a measured value, not a timed pass
    short: str = ""  # title for the chart
    ref: str = "ours"  # the row the ratios compare with
    impls: dict[str, Impl] = field(default_factory=dict)
    time_ratios: dict[str, str] = field(default_factory=dict)  # row -> row whose time its note compares

    def ref_of(self, impl: str) -> str:
        return self.impls[impl].ref or self.ref


@dataclass
class Target:
    case: str
    text: str
    row: str
    other: str | None = None  # row / other >= at_least (throughputs); None: the row's own value
    at_least: float | None = None  # ... is >= at_least
    below: float | None = None  # ... or < below
    metric: str | None = None  # compare this metric of the row (run()'s "metrics") instead


DATASETS: dict[str, Dataset] = {}
CASES: dict[str, Case] = {}
TARGETS: list[Target] = []
SPEC: dict = {}  # in a worker process: its spec (dataset params, quick, scratch, ...)


def dataset(name: str, *, full: dict, quick: dict, describe: Callable[[dict], str],
            tiny: dict | None = None, folder: bool = False):
    """Register ``build(path, params) -> expected tally`` as data set ``name``."""
    def register(build):
        DATASETS[name] = Dataset(name, build, full, quick, tiny or quick, describe, folder)
        return build
    return register


def case(name: str, *, dataset: str, unit: str, repeats: int, quick_repeats: int, title: str,
         probe: bool = True, measure: bool = False, short: str = "", ref: str = "ours") -> Case:
    """Register a case: one workload over one data set, measured in ``unit``."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r} is not one of {sorted(UNITS)}")
    CASES[name] = Case(name, dataset, unit, repeats, quick_repeats, title, probe, measure,
                       short or title, ref)
    return CASES[name]


def worker(case_name: str, impl: str, *, note: str, ref: str | None = None, python: str | None = None,
           yardstick: bool = False):
    """Register ``make(path) -> run`` as contender ``impl`` of a case.

    Args:
        ref: the row its ratios compare with, if not the case's.
        python: run it under this interpreter: a path, or the name of a virtualenv
            ``benchmarks/venvs/NAME`` (``$TFRECORD_BENCH_VENVS/NAME``); if it is missing the
            row is skipped with a note.
        yardstick: a ceiling or yardstick, not a peer.
    """
    def register(make):
        CASES[case_name].impls[impl] = Impl(impl, make, note, ref, python, yardstick)
        return make
    return register


def target(case_name: str, text: str, row: str, other: str | None = None, *,
           at_least: float | None = None, below: float | None = None, metric: str | None = None) -> None:
    """Register a reported (not asserted) target: ``row / other >= at_least``, or the row's own
    value (or its ``metric``, one of the ``metrics`` a measure case's run() returns)
    ``>= at_least`` or ``< below``."""
    TARGETS.append(Target(case_name, text, row, other, at_least, below, metric))


def time_ratio(case_name: str, row: str, other: str) -> None:
    """Say in ``row``'s note how many times ``other``'s time it takes."""
    CASES[case_name].time_ratios[row] = other


def interpreter(impl: Impl, default: str) -> tuple[str | None, str]:
    """The Python that runs a contender, or None and why not."""
    if impl.python is None:
        return default, ""
    path = impl.python
    if os.sep not in path:
        path = os.path.join(VENVS, path, "bin", "python")
    if os.access(path, os.X_OK):
        return path, ""
    return None, f"skipped: its interpreter {path} is missing (see benchmarks/venvs/README.md)"


def names_in(spec: str, known: Iterable[str]) -> list[str]:
    """The names a comma-separated ``--only`` holds, each taken whole though
    names hold commas themselves ("per sample, workers=0,tf.data"): at each
    part, the longest run of parts that is a known name.

    Raises:
        ValueError: naming the parts from where no known name begins.
    """
    known = set(known)
    parts = [p.strip() for p in spec.split(",")] if spec else []
    names, k = [], 0
    while k < len(parts):
        if not parts[k]:  # "a,,b" or a trailing comma
            k += 1
            continue
        for end in range(len(parts), k, -1):
            name = ", ".join(parts[k:end])
            if name in known:
                names.append(name)
                k = end
                break
        else:
            raise ValueError(f"no name begins {', '.join(parts[k:])!r}")
    return names


def load_cases() -> None:
    """Import the case modules (``benchmarks.cases``, then any in $TFRECORD_BENCH_EXTRA_CASES)."""
    from benchmarks import cases

    for name in cases.MODULES:
        importlib.import_module(f"benchmarks.cases.{name}")
    for name in filter(None, os.environ.get("TFRECORD_BENCH_EXTRA_CASES", "").split(",")):
        importlib.import_module(name)
