"""A newcomer's common mistakes, written as a user writes them: each gives
the library's own message, naming the file, record and key, and the fix."""

import functools
import io
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from tfrecord_torch import (
    CorruptRecordError,
    FeatureError,
    Image,
    IndexedTFRecordDataset,
    Int64,
    Payload,
    RecordWriter,
    Source,
    Text,
    TFRecordDataset,
    make_example,
    pad_collate,
    tfspec,
)


def run_peer(folder, body, args):
    """``body`` run with the ``tfrecord`` package in a fresh interpreter (it
    cannot share a process with TensorFlow); what it stores in ``result``."""
    inp, out = folder / "peer_args.pkl", folder / "peer_result.pkl"
    inp.write_bytes(pickle.dumps(args))
    code = ("import pickle, sys\nargs = pickle.load(open(sys.argv[1], 'rb'))\n" + textwrap.dedent(body)
            + "\npickle.dump(result, open(sys.argv[2], 'wb'))\n")
    done = subprocess.run([sys.executable, "-c", code, str(inp), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return pickle.loads(out.read_bytes())


def jpeg(height, width):
    buf = io.BytesIO()
    PILImage.fromarray(np.full((height, width, 3), 100, np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


@pytest.fixture
def photos(tmp_path):
    """Four records of JPEG images of different heights, a label, a name and tags."""
    path = tmp_path / "photos.tfrecord"
    with RecordWriter(path) as w:
        for i in range(4):
            w.write(make_example({"image": jpeg(8 + i, 8), "label": i, "name": f"n{i}",
                                  "tags": [f"t{i}", "x"], "scores": np.arange(i + 1, dtype=np.float32)}))
    return path


def test_pad_collate_passes_bytes_through_as_lists(photos):
    """A TF description with string features (the image too) batches under
    pad_collate: bytes and lists of bytes are lists, one per record, as
    tf.io.parse_single_example gives them record by record."""
    description = {"image": tfspec.FixedLenFeature([], "string"),
                   "name": tfspec.FixedLenFeature([], "string"),
                   "tags": tfspec.VarLenFeature("string"),
                   "label": tfspec.FixedLenFeature([], "int64")}
    ds = TFRecordDataset(photos, features=description)
    batch = next(iter(DataLoader(ds, batch_size=4, collate_fn=pad_collate)))
    assert batch["image"] == [jpeg(8 + i, 8) for i in range(4)]
    assert batch["name"] == [b"n0", b"n1", b"n2", b"n3"]
    assert batch["tags"] == [[f"t{i}".encode(), b"x"] for i in range(4)]  # not transposed
    assert batch["label"].tolist() == [0, 1, 2, 3]


def test_indexing_the_streaming_dataset_points_to_the_indexed_one(photos):
    ds = TFRecordDataset(photos, features={"label": Int64()})
    with pytest.raises(TypeError, match=r"IterableDataset.*IndexedTFRecordDataset\(paths"):
        ds[0]
    assert IndexedTFRecordDataset(photos, features={"label": Int64()})[2]["label"].item() == 2


@pytest.mark.parametrize("dataset", [TFRecordDataset, IndexedTFRecordDataset])
def test_tfrecord_package_positional_call_explains_the_keywords(photos, tmp_path, dataset):
    """The tfrecord package's ``TFRecordDataset(data_path, index_path, description)``."""
    with pytest.raises(TypeError, match=r"takes one positional argument.*index=\[index_path\], "
                                        r"features=description"):
        dataset(str(photos), str(tmp_path / "photos.idx"), {"image": "byte", "label": "int"})


@pytest.mark.slow  # the peer in an interpreter of its own
def test_tfrecord_package_kinds_give_that_package_values(photos, tmp_path):
    """A description of the tfrecord package's kinds gives what that package
    gives (bytes, int64 [n], float32 [n]), as tensors; the peer runs in a
    fresh interpreter (it cannot share a process with TensorFlow)."""
    description = {"image": "byte", "label": "int", "scores": "float"}
    mine = list(TFRecordDataset(photos, features=description))
    peer = run_peer(tmp_path, """
        from tfrecord.torch.dataset import TFRecordDataset
        result = list(TFRecordDataset(args["path"], None, args["description"]))
    """, {"path": str(photos), "description": description})
    assert len(mine) == len(peer) == 4
    for a, b in zip(mine, peer):
        assert a["image"] == b["image"]
        assert a["label"].dtype == torch.int64 and a["label"].tolist() == b["label"].tolist()
        assert a["scores"].dtype == torch.float32 and a["scores"].tolist() == b["scores"].tolist()


def test_unknown_kind_gives_the_mapping(photos):
    with pytest.raises(ValueError, match=r"features\['label'\] = 'int64'.*\"int\" -> Int64\(shape=None\)"):
        TFRecordDataset(photos, features={"image": "byte", "label": "int64"})


def test_missing_key_lists_the_record_keys_and_the_closest(photos):
    ds = TFRecordDataset(photos, features={"imgae": Image(), "label": Int64()})
    with pytest.raises(FeatureError) as err:
        next(iter(ds))
    message = str(err.value)
    assert str(photos) in message and "record 0" in message and "feature 'imgae'" in message
    assert "['image', 'label', 'name', 'scores', 'tags']" in message
    assert "did you mean 'image'?" in message and "default=" in message


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_importing_tensorflow_first_warns_at_import():
    """``import tensorflow`` then ``import tfrecord_torch`` (in a fresh
    interpreter: this order cannot be undone) warns with the import order."""
    code = "import tensorflow\nimport tfrecord_torch\n"
    done = subprocess.run([sys.executable, "-W", "always::RuntimeWarning", "-c", code], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "<string>:2: RuntimeWarning: TensorFlow was imported before torchvision: import torchvision " \
           "first" in done.stderr


# An interpreter importing TensorFlow and torch, about 15 s of CPU: slow. The docs' TensorFlow
# blocks import in this order under -W error in tests/journeys/test_doc_blocks.py, fast.
@pytest.mark.slow
def test_importing_torchvision_then_tensorflow_does_not_warn():
    """The order the docs give imports without the warning."""
    quiet = subprocess.run([sys.executable, "-W", "always::RuntimeWarning", "-c",
                            "import torchvision\nimport tensorflow\nimport tfrecord_torch\n"],
                           capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0 and "imported before torchvision" not in quiet.stderr


def _foreign_files(folder):
    """Files a loose pattern picks up beside the shards, and what each is."""
    import gzip
    import tarfile

    image = folder / "cat.jpg"
    image.write_bytes(jpeg(16, 16))
    png = folder / "mask.png"
    PILImage.fromarray(np.zeros((4, 4), np.uint8)).save(png)
    archive = folder / "images.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(image, arcname="cat.jpg")
    zipped = folder / "images.tar.gz"
    zipped.write_bytes(gzip.compress(archive.read_bytes()))
    files = [(image, "it looks like a JPEG image"), (png, "it looks like a PNG image"),
             (archive, "it looks like a tar archive"), (zipped, "its gzip data holds a tar archive")]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return files
    table = folder / "labels.parquet"
    pq.write_table(pa.table({"label": [1, 2]}), table)
    return [*files, (table, "it looks like a Parquet file")]


@pytest.mark.parametrize("index", [None, False], ids=["indexed", "streamed"])
def test_a_file_that_is_not_a_tfrecord_says_what_it_is(tmp_path, index):
    for path, what in _foreign_files(tmp_path):
        with pytest.raises(CorruptRecordError) as err:
            list(TFRecordDataset(path, source=Source(index=index)))
        message = str(err.value)
        assert message.startswith(f"{path}: record 0 at byte offset 0: not a TFRecord file: {what}")
        assert "CRC" not in message and "check the paths" in message


def test_gzipped_tfrecords_still_read(tmp_path):
    """Compressed TFRecords are sniffed after decompression: they read as before."""
    path = tmp_path / "data.tfrecord.gz"
    with RecordWriter(path, compression="gzip") as w:
        for i in range(3):
            w.write(make_example({"label": i}))
    assert [r["label"].item() for r in TFRecordDataset(path, features={"label": Int64()})] == [0, 1, 2]


@pytest.mark.parametrize("dataset", [TFRecordDataset, IndexedTFRecordDataset])
@pytest.mark.parametrize("features", [None, {"image": tfspec.FixedLenFeature([], "string"),
                                             "label": tfspec.FixedLenFeature([], "int64")}],
                         ids=["no-features", "tf-string-feature"])
def test_encoded_images_reaching_a_torchvision_transform(photos, dataset, features):
    """Without ``features=`` (or with the image as a TF string feature) a v2
    transform gets JPEG bytes, which it passes through unchanged: refused,
    naming the key and the spec that decodes it."""
    transform = v2.Compose([v2.ToImage(), v2.Resize(4)])
    ds = dataset(photos, features=features, transform=transform)
    with pytest.raises(TypeError) as err:
        next(iter(DataLoader(ds, batch_size=2, num_workers=1)))
    message = str(err.value)
    assert f"{photos}: record 0 at byte offset 0: feature 'image' holds encoded JPEG images" in message
    assert "features={'image': Image(), ...}" in message


def test_decoding_the_image_makes_the_same_transform_work(photos):
    transform = v2.Compose([v2.ToImage(), v2.Resize(4)])
    ds = TFRecordDataset(photos, features={"image": Image(), "label": Int64()}, transform=transform)
    assert next(iter(ds))["image"].shape == (3, 4, 4)


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("dataset", [TFRecordDataset, IndexedTFRecordDataset])
def test_default_collate_of_images_of_different_sizes(photos, dataset, workers):
    """Images of several sizes under DataLoader's default collate: the error
    names the key, the sizes and records met, and the fixes -- also re-raised
    from a worker."""
    ds = dataset(photos, features={"image": Image(), "label": Int64()})
    with pytest.raises(RuntimeError) as err:
        next(iter(DataLoader(ds, batch_size=4, num_workers=workers)))
    message = str(err.value)
    assert (f"default_collate cannot stack feature 'image': its values differ in size in this batch, "
            f"[3, 8, 8] ({photos}: record 0 at byte offset 0) and [3, 9, 8] ({photos}: record 1 at byte "
            f"offset ") in message
    assert "collate_fn=pad_collate" in message and "v2.Resize((H, W))" in message
    assert "stack expects each tensor" not in message.split("Original Traceback")[-1].splitlines()[-1]


def test_default_collate_of_variable_length_values(photos):
    ds = TFRecordDataset(photos, features={"scores": tfspec.VarLenFeature("float32")})
    with pytest.raises(RuntimeError, match=r"feature 'scores': its values differ in size in this batch, \[1\] "
                                           r"\(.*record 0 .*\) and \[2\] \(.*record 1 .*variable-length.*"
                                           r"collate_fn=pad_collate"):
        next(iter(DataLoader(ds, batch_size=4)))
    batch = next(iter(DataLoader(ds, batch_size=4, collate_fn=pad_collate)))  # the fix it names
    assert batch["scores_length"].tolist() == [1, 2, 3, 4]


def test_items_stay_dicts(photos):
    """Items compare, pickle and transform as the plain dicts they were, and
    default_collate batches same-sized values as it did."""
    import pickle

    ds = TFRecordDataset(photos, features={"name": Text(), "image": Image(), "label": Int64()})
    item = next(iter(ds))
    assert isinstance(item, dict) and {"name": item["name"]} == {"name": "n0"}
    again = pickle.loads(pickle.dumps(item))
    assert isinstance(again, dict) and list(again) == ["name", "image", "label"]
    assert torch.equal(again["image"], item["image"])
    resized = v2.Resize((4, 4))(item)  # a v2 transform sees through it (torch pytree)
    assert resized["image"].shape == (3, 4, 4) and isinstance(resized, dict)
    batch = next(iter(DataLoader(TFRecordDataset(photos, features={"label": Int64(), "name": Text()}),
                                 batch_size=4)))
    assert type(batch) is dict and batch["label"].tolist() == [0, 1, 2, 3] and batch["name"][1] == "n1"


def half_label(item, scale=0.5):
    """A transform defined at the top level of a module: it pickles."""
    return {**item, "label": item["label"] * scale}


def label_only(payload):
    """A payload decoder defined at the top level of a module."""
    from tfrecord_torch import parse_example

    return {"label": int(parse_example(payload)["label"][0])}


def ignore(error):
    """An on_error callable defined at the top level of a module."""


def _lambdas(argument):
    """A dataset's keyword arguments with a lambda where ``argument`` takes a callable."""
    if argument == "transform":
        return {"features": {"label": Int64()}, "transform": lambda item: item}
    if argument == "decode":
        return {"features": Payload(decode=lambda payload: len(payload))}
    return {"features": {"label": Int64()}, "on_error": lambda error: None}


@pytest.mark.parametrize("argument, spelled", [("transform", "transform="),
                                               ("decode", "features=Payload(decode=...)"),
                                               ("on_error", "on_error=")])
@pytest.mark.parametrize("dataset", [TFRecordDataset, IndexedTFRecordDataset])
def test_a_lambda_under_spawn_names_the_argument_and_the_fix(photos, dataset, argument, spelled):
    """A lambda given to a dataset read by a DataLoader whose workers are
    spawned: the error names the dataset's argument and says what pickles."""
    ds = dataset(photos, **_lambdas(argument))
    loader = DataLoader(ds, num_workers=1, multiprocessing_context="spawn")
    with pytest.warns(UserWarning, match="pickle error"):  # torch's own note, then our error
        with pytest.raises(pickle.PicklingError) as err:
            next(iter(loader))
    message = str(err.value)
    assert message.startswith(f"{dataset.__name__}'s {spelled} (")
    assert "<lambda>" in message and "'spawn' or 'forkserver'" in message
    assert "define the function with `def` at the top level of a module" in message
    assert "functools.partial(function, ...)" in message


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
@pytest.mark.parametrize("dataset", [TFRecordDataset, IndexedTFRecordDataset])
def test_top_level_functions_and_partials_run_under_spawn(photos, dataset):
    """The fix the error names: top-level functions, bound with
    functools.partial, read in a spawned worker as in the main process."""
    ds = dataset(photos, features=Payload(decode=label_only), transform=functools.partial(half_label, scale=0.25),
                 on_error=ignore)
    loader = DataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context="spawn")
    assert next(iter(loader))["label"].tolist() == [0.0, 0.25, 0.5, 0.75]
