"""Datasets pickled with the callables they were given (data/spawncheck.py):
one that does not pickle raises a PicklingError naming the argument before
the pickler meets it; copies share the callables as before; a dataset whose
callables pickle goes through a round trip with nothing added."""

import copy
import functools
import pickle

import pytest
from helpers import write_shards

from tfrecord_torch import IndexedTFRecordDataset, Int64, Payload, TFRecordDataset, mix
from tfrecord_torch.data.spawncheck import PickleCheck


def add(item, n):
    return {**item, "id": item["id"] + n}


DATASETS = [TFRecordDataset, IndexedTFRecordDataset]


def items(ds):
    return [int(item["id"]) for item in ds]


@pytest.mark.parametrize("dataset", DATASETS)
def test_a_lambda_transform_raises_a_pickling_error_naming_it(tmp_path, dataset):
    write_shards(tmp_path, [5])
    ds = dataset(tmp_path, features={"id": Int64()}, transform=lambda item: item)
    with pytest.raises(pickle.PicklingError, match=rf"^{dataset.__name__}'s transform= \(test_a_lambda_transform"
                                                   rf"_raises_a_pickling_error_naming_it.<locals>.<lambda>\) does "
                                                   r"not pickle \(AttributeError: Can't pickle local object") as err:
        pickle.dumps(ds)
    assert isinstance(err.value.__cause__, AttributeError)


@pytest.mark.parametrize("dataset", DATASETS)
def test_copies_of_a_dataset_with_a_lambda_share_it(tmp_path, dataset):
    """copy and deepcopy do not pickle functions: they keep working, with no check left in the copy."""
    write_shards(tmp_path, [5])
    transform = lambda item: {**item, "id": item["id"] * 2}  # noqa: E731
    ds = dataset(tmp_path, features={"id": Int64()}, transform=transform)
    for made in (copy.copy(ds), copy.deepcopy(ds)):
        assert made.transform is transform
        assert items(made) == [0, 2, 4, 6, 8]
        assert not any(isinstance(v, PickleCheck) for v in vars(made).values())
        assert sorted(vars(made)) == sorted(vars(ds))


@pytest.mark.parametrize("dataset", DATASETS)
def test_a_dataset_whose_callables_pickle_round_trips_unchanged(tmp_path, dataset):
    write_shards(tmp_path, [5])
    ds = dataset(tmp_path, features={"id": Int64()}, transform=functools.partial(add, n=10), on_error=print)
    again = pickle.loads(pickle.dumps(ds))
    assert sorted(vars(again)) == sorted(vars(ds))
    assert items(again) == items(ds) == [10, 11, 12, 13, 14]


def test_a_payload_decode_hook_and_an_on_error_callable_are_named(tmp_path):
    write_shards(tmp_path, [5])
    with pytest.raises(pickle.PicklingError, match=r"^TFRecordDataset's features=Payload\(decode=\.\.\.\) "):
        pickle.dumps(TFRecordDataset(tmp_path, features=Payload(decode=lambda b: b)))
    with pytest.raises(pickle.PicklingError, match=r"^IndexedTFRecordDataset's on_error= "):
        pickle.dumps(IndexedTFRecordDataset(tmp_path, on_error=lambda e: None))


def test_a_mix_names_the_dataset_inside_it(tmp_path):
    write_shards(tmp_path, [5])
    good = TFRecordDataset(tmp_path, features={"id": Int64()})
    bad = TFRecordDataset(tmp_path, features={"id": Int64()}, transform=lambda item: item)
    with pytest.raises(pickle.PicklingError, match=r"^TFRecordDataset's transform= "):
        pickle.dumps(mix([good, bad]))
