"""Mixing several datasets with exact weights (tf.data's ``sample_from_datasets``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from tfrecord_torch.data import plan
from tfrecord_torch.data.epochs import EpochCounter
from tfrecord_torch.data.state import FORMAT, check_position_known, check_state

__all__ = ["MixedDataset", "mix"]

_END = object()


def mix(datasets: Sequence[Any], *, weights: Sequence[float] | None = None, seed: int = 0,
        stop_on_first_exhausted: bool = False) -> MixedDataset:
    """A weighted, deterministic interleave of several datasets.

    Each step takes the next item of one dataset; over every 16 steps each
    dataset gets ``weights[i]`` of them (within one), in a random order that
    depends on ``seed`` and the epoch. The weights hold exactly for every
    reader: in a DataLoader worker each dataset yields that worker's share
    (as :class:`~tfrecord_torch.TFRecordDataset` does), and the worker mixes
    its own shares; ranks likewise.

    Args:
        datasets: iterable datasets that split themselves over ranks and
            DataLoader workers (TFRecordDataset, or another mix).
        weights: one non-negative number per dataset (normalized); default equal.
        seed: the mixing seed.
        stop_on_first_exhausted: True ends the epoch when the first dataset
            runs out (tf.data's ``stop_on_empty_dataset``); False (default)
            starts a finished dataset again (its next epoch) until every
            dataset has been read through at least once, so small datasets
            are oversampled as the weights say.

    Returns:
        A :class:`MixedDataset` (an IterableDataset) with ``set_epoch``,
        ``state_dict``/``load_state_dict`` and ``len()`` when every dataset
        has a length.
    """
    return MixedDataset(datasets, weights=weights, seed=seed, stop_on_first_exhausted=stop_on_first_exhausted)


class MixedDataset(torch.utils.data.IterableDataset):
    """The dataset :func:`mix` returns (see there)."""

    def __init__(self, datasets: Sequence[Any], *, weights: Sequence[float] | None = None, seed: int = 0,
                 stop_on_first_exhausted: bool = False) -> None:
        super().__init__()
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("mix: datasets must hold at least one dataset")
        for i, ds in enumerate(self.datasets):
            if not hasattr(ds, "__iter__"):
                raise ValueError(f"mix: datasets[{i}] is not iterable: {ds!r:.100}")
        weights = [1.0] * len(self.datasets) if weights is None else list(weights)
        if len(weights) != len(self.datasets):
            raise ValueError(f"mix: got {len(weights)} weights for {len(self.datasets)} datasets")
        try:
            w = np.asarray(weights, np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"mix: weights must be numbers, got {weights!r}") from None
        if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"mix: weights must be finite, >= 0 and not all 0, got {weights!r}")
        self.weights = (w / w.sum()).tolist()
        self.seed, self.stop_on_first_exhausted = int(seed), bool(stop_on_first_exhausted)
        self._epochs = EpochCounter()
        self.epoch = 0
        self._run = _Interleaving(self.datasets, (), self.weights, self.stop_on_first_exhausted)
        self._resume: dict | None = None

    def __repr__(self) -> str:
        parts = ", ".join(f"{w:.3g}: {type(d).__name__}" for w, d in zip(self.weights, self.datasets))
        how = "stop_on_first_exhausted" if self.stop_on_first_exhausted else "cycling"
        return f"MixedDataset({{{parts}}}, seed={self.seed}, {how})"

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration read ``epoch``, for the mix and every dataset
        that has ``set_epoch`` (by default each iteration starts the next epoch)."""
        self._epochs.set(epoch)
        self.epoch = int(epoch)
        for ds in self.datasets:
            if hasattr(ds, "set_epoch"):
                ds.set_epoch(epoch)

    def _choices(self, reader: int) -> Iterator[int]:
        return plan.mix_choices(self.weights, seed=self.seed, epoch=self.epoch, reader=reader)

    def _reader(self, layout: dict | None = None) -> int:
        layout = self._layout() if layout is None else layout
        return layout["rank"] * max(layout["num_workers"], 1) + layout["worker"]

    def _layout(self) -> dict:
        """This reader's place: its rank and DataLoader worker, and how many of each
        (``num_workers`` 0 outside a worker, as the DataLoader was built)."""
        from tfrecord_torch.data.plan import resolve_rank

        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 0) if info is None else (info.id, info.num_workers)
        first = self.datasets[0]
        rank, world = getattr(first, "rank", None), getattr(first, "world_size", None)
        if rank is None:  # a dataset that names only its rank keeps it, as _reader always took it
            rank, world = resolve_rank(rank, world)
        return {"rank": rank, "world_size": world, "worker": worker, "num_workers": workers}

    def __len__(self) -> int:
        """Items of the next iteration's epoch read in one process: the steps until the first
        dataset runs out, or (cycling) until each has been read through once.
        With DataLoader workers each worker mixes its own shares, so the total
        can differ by a few items per worker."""
        try:
            lengths = [len(ds) for ds in self.datasets]
        except TypeError:
            raise TypeError("len() is unknown: some mixed dataset has no len()") from None
        choices = plan.mix_choices(self.weights, seed=self.seed, epoch=self._epochs.peek(), reader=self._reader())
        # The same loop as __iter__, over stand-ins of the datasets' lengths.
        ranges = [range(n) for n in lengths]
        return sum(1 for _ in _Interleaving(ranges, choices, self.weights, self.stop_on_first_exhausted))

    # --- resuming ------------------------------------------------------------

    def _settings(self) -> dict:
        return {"seed": self.seed, "weights": self.weights, "stop_on_first_exhausted": self.stop_on_first_exhausted,
                "datasets": len(self.datasets)}

    def state_dict(self) -> dict:
        """The epoch, the steps taken in it, which datasets have run out, each
        dataset's own state and the settings (refused if they differ on load).

        Raises:
            RuntimeError: called in the main process while a plain DataLoader's
                workers read the mix (use StatefulDataLoader's state_dict).
        """
        check_position_known(self._epochs, type(self).__name__)
        children = [ds.state_dict() if hasattr(ds, "state_dict") else None for ds in self.datasets]
        return {"format": FORMAT, "epoch": self.epoch, "position": self._run.position,
                "exhausted": list(self._run.exhausted), "states": children, "layout": self._layout(),
                **self._settings()}

    def load_state_dict(self, state: dict) -> None:
        """Resume after the saved step of the saved epoch; each dataset resumes
        from its own saved state.

        A mix resumes only where it was saved: the same world size and
        ``num_workers``, each DataLoader worker from its own state (through
        ``StatefulDataLoader.load_state_dict``). Each reader mixes its own
        shares of the datasets, so what one reader read says nothing of what
        another layout's readers should read next. A state loaded here in
        the main process and read by DataLoader workers is refused at their
        first read, with the same ``ValueError``.

        Raises:
            ValueError: the state comes from another seed, weights, stop rule
                or number of datasets, or another layout (world size,
                ``num_workers``; also a whole ``StatefulDataLoader`` state,
                which is for the loader), or a dataset refuses its state.
        """
        if isinstance(state, dict) and ("_snapshot" in state or "_num_yielded" in state):
            raise self._layout_error("a StatefulDataLoader's state_dict() (the whole loader's)", state)
        state = check_state(state, self._settings(), what=type(self).__name__)
        saved, here = state.get("layout"), self._layout()
        if saved is not None and not _same_readers(saved, here):
            raise self._layout_error(f"the state of {_place(saved)}, here {_place(here)}", state)
        for ds, child in zip(self.datasets, state["states"]):
            if child is not None:
                if not hasattr(ds, "load_state_dict"):
                    raise ValueError(f"MixedDataset.load_state_dict: {type(ds).__name__} cannot load a state")
                ds.load_state_dict(child)
        self.epoch = int(state["epoch"])
        self._epochs.restore(self.epoch)
        self._resume = dict(state)

    def _layout_error(self, got: str, state: dict, where: str = "load_state_dict") -> ValueError:
        loader = state.get("_snapshot")
        if isinstance(loader, dict):  # a StatefulDataLoader's with workers: their own states are inside
            workers = loader.get("_main_snapshot", {}).get("_num_workers")
            mine = [w.get("dataset_state") for w in loader.get("_worker_snapshots", {}).values() if isinstance(w, dict)]
            epoch = next((m["epoch"] for m in mine if isinstance(m, dict) and "epoch" in m), None)
        elif "_num_yielded" in state:  # a StatefulDataLoader's without workers
            workers, epoch = 0, (state.get("dataset_state") or {}).get("epoch")
        else:
            workers, epoch = (state.get("layout") or {}).get("num_workers"), state.get("epoch")
        same = f"num_workers={workers}" if workers is not None else "the num_workers it was saved with"
        return ValueError(
            f"{type(self).__name__}.{where}: got {got}. A mix resumes only under the layout it was saved "
            f"under (each reader mixes its own shares): build the StatefulDataLoader with the same world size and "
            f"{same}, and give the loader's state to loader.load_state_dict. Under another layout, start the epoch again "
            f"with mixed.set_epoch({'epoch' if epoch is None else epoch}): the records read before the restart "
            "are read again.")

    # --- iteration -----------------------------------------------------------

    def __iter__(self) -> Iterator:
        resume, here = self._resume, self._layout()
        if resume is not None and resume.get("layout") is not None and not _same_readers(resume["layout"], here):
            # loaded in the main process, read by workers: refused as load_state_dict refuses it
            raise self._layout_error(f"the state of {_place(resume['layout'])}, read by {_place(here)}", resume,
                                     where="__iter__")
        self.epoch = self._epochs.start()
        self._resume = None
        self._run = _Interleaving(self.datasets, self._choices(self._reader(here)), self.weights,
                                  self.stop_on_first_exhausted,
                                  skip=0 if resume is None else int(resume["position"]),
                                  exhausted=None if resume is None else resume["exhausted"])
        return iter(self._run)


class _Interleaving:
    """One epoch of a mix: the loop behind both ``iter()`` and ``len()`` of a MixedDataset.

    Each choice takes the next item of that source. A source that runs out
    ends the epoch (``stop_on_first_exhausted``) or starts again with a new
    ``iter()`` (its next epoch) until every source with weight has been read
    through once; a source still empty when started again drops out.

    Attributes:
        position: the steps of ``choices`` done (where a restored epoch resumes).
        exhausted: which sources have been read through at least once.
    """

    def __init__(self, sources: Sequence[Iterable], choices: Iterable[int], weights: Sequence[float],
                 stop_on_first_exhausted: bool, *, skip: int = 0, exhausted: Sequence[bool] | None = None) -> None:
        self.sources, self.choices, self.weights = sources, choices, weights
        self.stop_on_first_exhausted = stop_on_first_exhausted
        self.position = skip
        self.exhausted = [False] * len(sources) if exhausted is None else list(exhausted)

    def __iter__(self) -> Iterator:
        skip = self.position
        iterators: list[Iterator | None] = [None] * len(self.sources)
        live = [w > 0 for w in self.weights]
        for step, i in enumerate(self.choices):
            if step < skip:
                continue  # each source resumes from its own state
            if not self.stop_on_first_exhausted and all(e or not ok for e, ok in zip(self.exhausted, live)):
                return
            item = _END
            for _attempt in range(2):  # a finished source starts again once (its next epoch)
                if iterators[i] is None:
                    iterators[i] = iter(self.sources[i])
                item = next(iterators[i], _END)  # type: ignore[arg-type]
                if item is not _END:
                    break
                iterators[i] = None
                if self.stop_on_first_exhausted:
                    return
                if not self.exhausted[i]:
                    self.exhausted[i] = True
                    if all(e or not ok for e, ok in zip(self.exhausted, live)):
                        return
            if item is _END:  # empty even when started again: it cannot give its share
                live[i] = False
                self.exhausted[i] = True
                if not any(live):
                    return
                continue
            self.position = step + 1
            yield item


def _place(layout: dict) -> str:
    where = (f"DataLoader worker {layout['worker']} of {layout['num_workers']}" if layout["num_workers"] else
             "the main process (num_workers=0)")
    world = "" if layout["world_size"] is None else f" of {layout['world_size']}"
    return f"{where} on rank {layout['rank']}{world}"


def _same_readers(a: dict, b: dict) -> bool:
    """Whether two layouts read alike: no workers and one worker are one reader per rank."""
    return {**a, "num_workers": max(a["num_workers"], 1)} == {**b, "num_workers": max(b["num_workers"], 1)}
