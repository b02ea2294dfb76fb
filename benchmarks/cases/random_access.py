"""Random access: one item at a time by index, in a random order, CRCs checked where supported."""

from __future__ import annotations

from benchmarks.harness.registry import SPEC, case, dataset, target, worker


@dataset("examples_keyed", full={"records": 100_000, "reads": 20_000, "floats": 32, "seed": 0},
         quick={"records": 20_000, "reads": 5_000, "floats": 32, "seed": 0},
         tiny={"records": 2_000, "reads": 500, "floats": 32, "seed": 0},
         describe=lambda p: (f"{p['records']:,} tf.train.Examples: bytes 'key' (the record number, 8 digits), "
                             f"int64 'label' (i % 1000) + {p['floats']}-float 'x', with our index; "
                             f"a pass reads {p['reads']:,} of them in a random order"))
def build_keyed(path: str, p: dict) -> dict:
    import numpy as np

    from tfrecord_torch import RecordWriter, build_index, make_example

    xs = np.random.default_rng(p["seed"]).standard_normal((p["records"], p["floats"]), dtype=np.float32)
    with RecordWriter(path) as w:
        for i in range(p["records"]):
            w.write(make_example({"key": b"%08d" % i, "label": i % 1000, "x": xs[i]}))
    build_index(path)
    return {"records": p["reads"], "checksum": sum(i % 1000 for i in _order(p))}


def _order(p: dict | None = None) -> list[int]:
    """The record numbers a pass reads, in order (the same in every worker)."""
    import numpy as np

    p = p or SPEC["params"]
    return np.random.default_rng(p["seed"] + 1).permutation(p["records"])[:p["reads"]].tolist()


case("random_access", dataset="examples_keyed", unit="records/s", repeats=3, quick_repeats=2, probe=False,
     title="Random access: one record at a time by index, in a random order, decoded (CRCs checked where "
           "supported)",
     short="random_access: records by index, random order")

_SPEC_NOTE = 'features={"label": Int64(), "x": Float(shape=(32,))}: int64 tensor [] + float32 tensor [32]'


def _ours(path):
    from tfrecord_torch import Float, IndexedTFRecordDataset, Int64

    return IndexedTFRecordDataset(path, features={"label": Int64(), "x": Float(shape=(32,))})


class _Tally:
    """Sums the items' labels 1,024 at a time (one torch.stack each), keeping no item longer:
    int(tensor) per item would cost as much as reading it, and holding every item would
    bill the garbage collector to ours alone."""

    def __init__(self) -> None:
        self.records, self.checksum, self.labels = 0, 0, []

    def add(self, item) -> None:
        self.labels.append(item["label"])
        if len(self.labels) == 1024:
            self.flush()

    def flush(self) -> None:
        import torch

        if self.labels:
            self.records += len(self.labels)
            self.checksum += int(torch.stack(self.labels).sum())
            self.labels = []

    def result(self) -> dict:
        self.flush()
        return {"records": self.records, "checksum": self.checksum}


@worker("random_access", "ours", note=f"IndexedTFRecordDataset(path, {_SPEC_NOTE}); ds[i] per item; CRCs checked")
def random_ours(path):
    ds, order = _ours(path), _order()

    def run():
        tally = _Tally()
        for i in order:
            tally.add(ds[i])
        return tally.result()
    return run


@worker("random_access", "ours __getitems__",
        note="the same dataset, ds.__getitems__(64 indices) per batch (what the DataLoader calls): each "
             "batch read in file order, items in the order asked; CRCs checked")
def random_ours_getitems(path):
    ds, order = _ours(path), _order()

    def run():
        tally = _Tally()
        for j in range(0, len(order), 64):
            for item in ds.__getitems__(order[j:j + 64]):
                tally.add(item)
        return tally.result()
    return run


@worker("random_access", "ours IndexedReader[i] + parse_example",
        note="IndexedReader(path)[i] (one pread, both CRCs checked) + parse_example: dicts of numpy "
             "arrays, no tensors (the closest to what the peers below return)")
def random_ours_reader(path):
    from tfrecord_torch import IndexedReader, parse_example

    reader, order = IndexedReader(path), _order()

    def run():
        checksum = 0
        for i in order:
            checksum += int(parse_example(reader[i])["label"][0])
        return {"records": len(order), "checksum": checksum}
    return run


@worker("random_access", "tfd-utils", python="tfd-utils",
        note="tfd_utils TFRecordRandomAccess(path, key_feature_name='key', use_pread=True).get_record(key): "
             "reads by key, not index (its own index, built before timing); two preads and "
             "Example.FromString per item, protobuf messages (label read from it); no CRC check; own venv")
def random_tfd_utils(path):
    import os

    from tfd_utils.random_access import TFRecordRandomAccess

    index = os.path.join(SPEC.get("scratch") or os.path.dirname(path), "tfd_utils.index")
    ra = TFRecordRandomAccess(path, key_feature_name="key", use_pread=True, index_file=index)
    keys = ["%08d" % i for i in _order()]

    def run():
        checksum = 0
        for key in keys:
            checksum += ra.get_record(key).features.feature["label"].int64_list.value[0]
        return {"records": len(keys), "checksum": checksum}
    return run


@worker("random_access", "tfr-reader", python="tfr-reader",
        note="tfr_reader's Cython reader: cython.indexer.TFRecordFileReader(path).get_example(i) + "
             "tfr_reader.example.decode (its Cython decoder): Feature objects (label read from it); "
             "fseek + fread, no CRC check; own venv")
def random_tfr_reader(path):
    from tfr_reader import example
    from tfr_reader.cython.indexer import TFRecordFileReader

    reader, order, decode = TFRecordFileReader(path, save_index=False), _order(), example.decode

    def run():
        checksum = 0
        for i in order:
            checksum += decode(reader.get_example(i))["label"].value[0]
        return {"records": len(order), "checksum": checksum}
    return run


target("random_access", "ours ds[i] >= 1.0x tfd-utils (CRCs checked, tensors out)", "ours", "tfd-utils",
       at_least=1.0)
target("random_access", "ours ds[i] >= 1.0x tfr-reader (CRCs checked, tensors out)", "ours", "tfr-reader",
       at_least=1.0)
