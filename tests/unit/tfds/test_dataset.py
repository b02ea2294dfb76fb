"""TFDS directories as TFDS writes them: a builder run by tensorflow_datasets itself is the oracle."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from tfrecord_torch import IndexedTFRecordDataset, TFRecordDataset, tfds_dataset

BUILDER = '''
import numpy as np
import tensorflow_datasets as tfds


class Tiny(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(None, None, 3)),
                "depth": tfds.features.Image(shape=(None, None, 1), dtype=np.uint16),
                "label": tfds.features.ClassLabel(names=["cat", "dog", "eel"]),
                "points": tfds.features.Tensor(shape=(None, 3), dtype=np.float32),
                "tokens": tfds.features.Sequence(np.int64),
                "flag": tfds.features.Tensor(shape=(), dtype=np.bool_),
                "mask": tfds.features.Tensor(shape=(3,), dtype=np.bool_),
                "small": tfds.features.Tensor(shape=(2,), dtype=np.int32),
                "byte": tfds.features.Tensor(shape=(), dtype=np.uint8),
                "wide": tfds.features.Tensor(shape=(2,), dtype=np.float64),
                "blob": tfds.features.Tensor(shape=(4, 5), dtype=np.float32, encoding="bytes"),
                "flags": tfds.features.Sequence(np.bool_),
                "objects": tfds.features.Sequence({"bbox": tfds.features.BBoxFeature(), "kind": np.int64}),
            }),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(6), "test": self._generate_examples(3)}

    def _generate_examples(self, n):
        rng = np.random.default_rng(n)
        for i in range(n):
            k = i % 3 + 1
            yield i, {"image": rng.integers(0, 256, (4, 5, 3), dtype=np.uint8),
                      "depth": rng.integers(0, 65536, (4, 5, 1), dtype=np.uint16),
                      "label": i % 3,
                      "points": rng.random((k, 3), dtype=np.float32),
                      "tokens": list(range(k)),
                      "flag": bool(i % 2),
                      "mask": [True, i % 2 == 0, False],
                      "small": [-(2 ** 31), i],
                      "byte": 250 + i % 3,
                      "wide": [0.1 * i, 1e300],
                      "blob": rng.standard_normal((4, 5)).astype(np.float32),
                      "flags": [j % 2 == 0 for j in range(k)],
                      "objects": {"bbox": [tfds.features.BBox(0.1 * j, 0.2, 0.5, 0.6) for j in range(k)],
                                  "kind": list(range(k))}}
'''

PREPARE = '''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
sys.path.insert(0, sys.argv[1])
import numpy as np
import tensorflow_datasets as tfds
from tiny_builder.tiny import Tiny

builder = Tiny(data_dir=sys.argv[2])
builder.download_and_prepare()
out = {"dtypes": {}}
for split in ("train", "test"):
    rows = []
    for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
        rows.append({k: (v.tolist() if hasattr(v, "tolist") else
                         {kk: vv.tolist() for kk, vv in v.items()}) for k, v in ex.items()})
        for k, v in ex.items():
            for kk, vv in (v.items() if isinstance(v, dict) else [(None, v)]):
                out["dtypes"][k if kk is None else f"{k}/{kk}"] = str(vv.dtype)
    out[split] = rows
with open(sys.argv[3], "w") as f:
    json.dump(out, f)
'''


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfds")
    (root / "code" / "tiny_builder").mkdir(parents=True)
    (root / "code" / "tiny_builder" / "__init__.py").write_text("")
    (root / "code" / "tiny_builder" / "tiny.py").write_text(BUILDER)
    proc = subprocess.run([sys.executable, "-c", PREPARE, str(root / "code"), str(root / "data"),
                           str(root / "oracle.json")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "data" / "tiny" / "1.0.0", json.loads((root / "oracle.json").read_text())


def _flat(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out.update({f"{k}/{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_every_feature_reads_as_tfds_as_numpy_gives_it(tiny):
    folder, oracle = tiny
    for split in ("train", "test"):
        items = list(tfds_dataset(folder, split))
        assert len(items) == len(oracle[split])
        for item, want in zip(items, oracle[split]):
            want = _flat(want)
            assert sorted(item) == sorted(want)
            for key, value in want.items():
                got = item[key].numpy()
                assert str(got.dtype) == oracle["dtypes"][key], key  # bool stays bool, int32 int32, ...
                if key in ("image", "depth"):
                    got = got.transpose(1, 2, 0)  # ours [C, H, W], TFDS [H, W, C]
                expected = np.asarray(value, dtype=got.dtype)
                assert got.shape == expected.shape, key
                assert np.array_equal(got, expected), key
    depth = next(iter(tfds_dataset(folder, "train")))["depth"]
    assert str(depth.dtype) == "torch.uint16" and int(depth.numpy().max()) > 255  # exact, not saturated


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_batch_mode_gives_a_tensor_of_bytes_encoding_as_tfds_batches_it(tiny):
    """A Tensor feature with encoding="bytes" (a RawTensor here) comes in
    batch mode as one tensor [B, 4, 5], TFDS's rows stacked, from the main
    process and from workers alike."""
    from torch.utils.data import DataLoader

    folder, oracle = tiny
    want = torch.tensor([row["blob"] for row in oracle["train"]], dtype=torch.float32)
    for workers in (0, 2):
        ds = tfds_dataset(folder, "train", batch_size=4)
        batches = list(DataLoader(ds, batch_size=None, num_workers=workers))
        assert [tuple(b["blob"].shape) for b in batches] == [(4, 4, 5), (2, 4, 5)]
        assert torch.equal(torch.cat([b["blob"] for b in batches]), want)


def test_supervised_pairs_and_class_names(tiny):
    folder, oracle = tiny
    ds = tfds_dataset(folder, "test", as_supervised=True)
    pairs = list(ds)
    assert [int(label) for _, label in pairs] == [row["label"] for row in oracle["test"]]
    assert all(tuple(image.shape) == (3, 4, 5) for image, _ in pairs)
    assert ds.classes == ["cat", "dog", "eel"]
    assert ds.features["label"].names == ["cat", "dog", "eel"]
    assert ds.features["label"].int2str(2) == "eel"


def test_a_tfds_folder_passed_as_a_folder_path_is_refused_naming_its_splits(tiny):
    """TFDS keeps a dataset's splits side by side in one folder: read as a folder path it
    would mix train and test, so it is refused with each split's glob and tfds_dataset."""
    folder, oracle = tiny
    for make in (TFRecordDataset, IndexedTFRecordDataset):
        with pytest.raises(ValueError) as info:
            make(folder)
        message = str(info.value)
        for split in ("train", "test"):
            glob = os.path.join(str(folder), f"tiny-{split}.tfrecord-*")
            assert f"{split} (1 shard: {glob!r})" in message
            assert len(TFRecordDataset(glob)) == len(oracle[split])  # the named glob reads the split
        assert f"tfds_dataset({str(folder)!r}, 'train')" in message


def test_filepath_template_is_honoured_and_name_is_optional(tiny, tmp_path):
    folder, oracle = tiny
    copy = tmp_path / "copy"
    (copy / "train").mkdir(parents=True)
    info = json.loads((folder / "dataset_info.json").read_text())
    del info["name"]
    for entry in info["splits"]:
        entry["filepathTemplate"] = "{SPLIT}/data.{FILEFORMAT}-{SHARD_INDEX}"
        if entry["name"] == "train":
            n = len(entry["shardLengths"])
            for i in range(n):
                shutil.copy(folder / f"tiny-train.tfrecord-{i:05d}-of-{n:05d}", copy / "train" / f"data.tfrecord-{i:05d}")
    (copy / "dataset_info.json").write_text(json.dumps(info))
    shutil.copy(folder / "features.json", copy / "features.json")
    items = list(tfds_dataset(copy, "train"))
    assert [int(i["label"]) for i in items] == [row["label"] for row in oracle["train"]]
    info["splits"][0]["filepathTemplate"] = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_INDEX}"
    (copy / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(Exception, match="filepathTemplate"):
        tfds_dataset(copy, info["splits"][0]["name"])
    info["splits"][0]["filepathTemplate"] = "../{SPLIT}-{SHARD_INDEX}"
    (copy / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(Exception, match="outside"):
        tfds_dataset(copy, info["splits"][0]["name"])


def test_as_supervised_without_supervised_keys_is_a_clear_error(tiny, tmp_path):
    folder, _ = tiny
    copy = tmp_path / "plain"
    shutil.copytree(folder, copy)
    info = json.loads((copy / "dataset_info.json").read_text())
    info.pop("supervisedKeys")
    (copy / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="no supervisedKeys"):
        tfds_dataset(copy, "train", as_supervised=True)


def test_bbox_features_as_bounding_boxes_on_their_image(tiny):
    """boxes_on="image": TFDS's normalised [ymin, xmin, ymax, xmax] become BoundingBoxes, XYXY
    pixels on the image's canvas (computed here from as_numpy's values), which v2 moves with it."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    folder, oracle = tiny
    items = list(tfds_dataset(folder, "train", boxes_on="image"))
    for item, want in zip(items, oracle["train"]):
        boxes = item["objects/bbox"]
        h, w = item["image"].shape[1:]
        stored = np.asarray(want["objects"]["bbox"], np.float32).reshape(-1, 4)
        assert type(boxes) is tv_tensors.BoundingBoxes and tuple(boxes.canvas_size) == (h, w)
        assert np.array_equal(boxes.numpy(), stored[:, [1, 0, 3, 2]] * np.array([w, h, w, h], np.float32))
    flipped = next(iter(tfds_dataset(folder, "train", boxes_on="image", transform=v2.RandomHorizontalFlip(p=1.0))))
    w = items[0]["image"].shape[2]
    assert torch.allclose(flipped["objects/bbox"][:, [2, 0]], w - items[0]["objects/bbox"][:, [0, 2]])
    with pytest.raises(ValueError, match=r"boxes_on='label' must name the Image feature .*\['depth', 'image'\]"):
        tfds_dataset(folder, "train", boxes_on="label")
