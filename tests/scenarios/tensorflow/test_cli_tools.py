"""The command line's data views over files TensorFlow writes: ``preview``
draws TensorFlow's decode of each image in its cell; ``inspect`` names the
images and prints descriptions that TensorFlow parses (Examples with images,
ragged value/length pairs, sparse index/value pairs, features some records
lack; SequenceExamples with context and feature lists) and whose printed
``tfrecord_torch`` spec reads the same values here; ``head`` names the images.

TensorFlow is imported unconditionally: the test environment always has it, and
a missing TensorFlow must fail loudly rather than skip these tests.
"""

from __future__ import annotations

import io
import json

import numpy as np
import tensorflow as tf
import torch
from PIL import Image as PILImage

import tfrecord_torch
from tfrecord_torch.cli import main

from .tf_oracle import floats, strings
from .tf_oracle import ints as int64s

QUADRANTS = np.array([[[200, 30, 40], [20, 180, 60]], [[30, 60, 220], [240, 230, 20]]], np.uint8)


def quadrant_image(h: int, w: int, shift: int) -> np.ndarray:
    """An h x w RGB image of four solid quadrants (colours rolled by ``shift``)."""
    colours = np.roll(QUADRANTS, shift, axis=2)
    rows = np.repeat([0, 1], [h // 2, h - h // 2])
    cols = np.repeat([0, 1], [w // 2, w - w // 2])
    return colours[rows][:, cols]


def encoded(array: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(array).save(buf, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


def write_image_file(path, fmt, sizes):
    """TensorFlow writes records of an image (``image/encoded``), a label and a name."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i, (h, wd) in enumerate(sizes):
            feature = {"image/encoded": strings([encoded(quadrant_image(h, wd, i), fmt)]),
                       "image/class/label": int64s([10 + i]), "name": strings([f"img{i}".encode()])}
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def imported(text: str) -> dict:
    """The names the ``from tfrecord_torch import ...`` that inspect prints brings in."""
    line = text[text.index("from tfrecord_torch import "):].split(")")[0].split(";")[0]
    names: dict = {}
    exec(line, names)
    return names


def block(text: str, start: str) -> str:
    """The first ``{...}`` block of ``text`` after ``start`` (with ``start``
    when it ends in ``{``, as ``"features = {"``)."""
    i = text.index(start)
    i = i if start.endswith("{") else text.index("{", i)
    return text[i:text.index("\n}", i) + 2]


def test_preview_draws_tensorflow_images(tmp_path, capsys):
    """Each cell's quadrants show the colours tf.io.decode_image gives at the
    quadrants' centres; the sheet's size is the grid's; labels are found."""
    from tfrecord_torch.cli.preview import Layout

    sizes = [(40, 60), (64, 32), (30, 30), (90, 120), (24, 50)]
    for fmt in ("PNG", "JPEG"):
        path = tmp_path / f"{fmt}.tfrecord"
        write_image_file(path, fmt, sizes)
        out = tmp_path / f"{fmt}.png"
        assert main(["preview", str(path), "--out", str(out), "--cols", "3", "--size", "96"]) == 0
        text = capsys.readouterr().out
        assert "5 images from 'image/encoded', labels from 'image/class/label'" in text
        assert f"cell 4: {path} record 4, image/class/label 14, {fmt} 50x24" in text
        layout = Layout(5, 3, 96)
        with PILImage.open(out) as im:
            sheet = np.asarray(im.convert("RGB")).astype(int)
        assert sheet.shape == (layout.height, layout.width, 3) == (2 * (96 + 14 + 4) + 4, 3 * 100 + 4, 3)
        payloads = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
        for i, payload in enumerate(payloads):
            parsed = tf.io.parse_single_example(payload, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})
            want = tf.io.decode_image(parsed["image/encoded"], channels=3).numpy().astype(int)
            h, w = want.shape[:2]
            scale = min(96 / w, 96 / h)
            tw, th = round(w * scale), round(h * scale)
            x0, y0 = layout.square(i)
            x0, y0 = x0 + (96 - tw) // 2, y0 + (96 - th) // 2
            for u in (0.25, 0.75):
                for v in (0.25, 0.75):
                    got = sheet[y0 + int(v * th), x0 + int(u * tw)]
                    expected = want[int(v * h), int(u * w)]
                    tolerance = 0 if fmt == "PNG" else 12  # a JPEG's neighbouring pixels differ a little
                    assert np.abs(got - expected).max() <= tolerance, (fmt, i, u, v, got, expected)


def test_inspect_names_tensorflow_images(tmp_path, capsys):
    """inspect names TensorFlow's JPEGs with their byte and pixel size
    ranges and prints Image(), which decodes them as TensorFlow does; head
    prints each image as its length and format."""
    path = tmp_path / "j.tfrecord"
    write_image_file(path, "JPEG", [(40, 60), (64, 32), (90, 120)])
    described = {"image/encoded": tf.io.FixedLenFeature([], tf.string)}
    sizes = [len(tf.io.parse_single_example(p, described)["image/encoded"].numpy())
             for p in tf.data.TFRecordDataset(str(path))]
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "JPEG images, " in text and ", 32x64-120x90" in text
    assert "'image/encoded': Image(),  # JPEG images" in text
    assert "'image/encoded': tf.io.FixedLenFeature([], tf.string),  # JPEG images" in text
    assert "decode with tf.io.decode_image" in text
    assert "from tfrecord_torch import Bytes, Image, Int64" in text
    spec = eval(block(text, "tfrecord_torch spec"), imported(text))
    images = [item["image/encoded"] for item in tfrecord_torch.TFRecordDataset(str(path), features=spec)]
    for image, payload in zip(images, tf.data.TFRecordDataset(str(path))):
        raw = tf.io.parse_single_example(payload, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})
        want = tf.io.decode_jpeg(raw["image/encoded"], channels=3, dct_method="INTEGER_ACCURATE").numpy()
        assert torch.equal(torch.as_tensor(image).permute(1, 2, 0), torch.from_numpy(want))
    assert main(["inspect", "--json", str(path)]) == 0
    content = json.loads(capsys.readouterr().out)["features"]["image/encoded"]["content"]
    assert content["formats"] == {"JPEG": 3} and content["spec"] == "Image()"
    assert content["smallest"] == [32, 64] and content["largest"] == [120, 90]
    assert (content["min_bytes"], content["max_bytes"]) == (min(sizes), max(sizes))
    assert main(["head", "-n", "1", str(path)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first == {"name": ["img0"], "image/class/label": [10], "image/encoded": [f"<{sizes[0]} bytes, JPEG>"]}


def flat(value) -> list:
    """Every value of a parsed feature, in order: TF's dense and sparse
    tensors, and our tensors, bytes and (nested) lists of steps."""
    if isinstance(value, tf.sparse.SparseTensor):
        return value.values.numpy().tolist()
    if isinstance(value, (tf.Tensor, torch.Tensor)):
        return np.asarray(value.numpy()).reshape(-1).tolist()
    if isinstance(value, list):
        return [v for item in value for v in flat(item)]
    return [value]


def test_inspect_descriptions_parse_in_tensorflow_with_our_values(tmp_path, capsys):
    """Examples with ragged (values + row lengths) and sparse (indices +
    values) pairs and features only some records hold: TF parses every
    record with the printed feature_description, and the printed spec reads
    the same values here."""
    path = tmp_path / "e.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(6):
            feature = {"label": int64s([i % 3]), "tokens": int64s(list(range(i + 1))),
                       "tokens/row_lengths": int64s([1, i]), "sparse/index": int64s(list(range(0, 2 * i, 2))),
                       "sparse/value": floats([0.5 * k for k in range(i)]), "xy": floats([i, -i])}
            if i % 2:
                feature["note"] = strings([b"odd"] * i)
                feature["weight"] = floats([1.5])
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    description = eval(block(text, "schema"), {"tf": tf})
    spec = eval(block(text, "tfrecord_torch spec"), imported(text))
    ours = list(tfrecord_torch.TFRecordDataset(str(path), features=spec))
    theirs = [tf.io.parse_single_example(p, description) for p in tf.data.TFRecordDataset(str(path))]
    assert len(ours) == len(theirs) == 6
    for o, t in zip(ours, theirs):
        assert set(o) == set(t) == {"label", "tokens", "tokens/row_lengths", "sparse/index", "sparse/value",
                                    "xy", "note", "weight"}
        for key in t:
            assert flat(o[key]) == flat(t[key]), key
            if not isinstance(t[key], tf.sparse.SparseTensor):
                assert tuple(o[key].shape) == tuple(t[key].shape), key


def test_inspect_sequence_descriptions_parse_in_tensorflow(tmp_path, capsys):
    """SequenceExamples: inspect lists the feature lists with their steps
    and widths; TF's parse_single_sequence_example takes the printed
    context_features and sequence_features, and the printed spec reads the
    same values here (fixed-width lists, lists some records lack, lists of
    varying width, image frames, context features some records lack)."""
    path = tmp_path / "s.tfrecord"
    frame = encoded(quadrant_image(8, 12, 0), "PNG")
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(5):
            lists = {"tok": [int64s([j]) for j in range(i + 1)],
                     "ragged": [int64s(list(range(j % 3))) for j in range(i + 2)],
                     "frames": [strings([frame]) for _ in range(i)],
                     "pairs": [strings([b"a", b"bc"]) for _ in range(i)]}
            if i % 2:
                lists["xy"] = [floats([0.5, j]) for j in range(i)]
            context = {"id": int64s([i]), **({"title": strings([b"t"])} if i == 2 else {})}
            message = tf.train.SequenceExample(
                context=tf.train.Features(feature=context),
                feature_lists=tf.train.FeatureLists(feature_list={
                    k: tf.train.FeatureList(feature=v) for k, v in lists.items()}))
            w.write(message.SerializeToString())
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    table = text[text.index("feature lists"):text.index("schema")]
    assert [line.split()[:5] for line in table.splitlines()[2:]] == [
        ["frames", "bytes", "0-4", "1", "5/5"], ["pairs", "bytes", "0-4", "2", "5/5"],
        ["ragged", "int64", "2-6", "0-2", "5/5"], ["tok", "int64", "1-5", "1", "5/5"],
        ["xy", "float", "1-3", "2", "2/5"]]
    assert "PNG images, " in table and "12x8" in table
    described: dict = {}
    exec(block(text, "context_features = {"), {"tf": tf}, described)
    exec(block(text, "sequence_features = {"), {"tf": tf}, described)
    specs: dict = {}
    ours_text = text[text.index("tfrecord_torch spec"):]
    exec(block(ours_text, "features = {"), imported(text), specs)
    exec(block(ours_text, "sequence_features = {"), imported(text), specs)
    ours = list(tfrecord_torch.TFRecordDataset(str(path), features=specs["features"],
                                               sequence_features=specs["sequence_features"]))
    assert len(ours) == 5
    for o, payload in zip(ours, tf.data.TFRecordDataset(str(path))):
        context, lists = tf.io.parse_single_sequence_example(
            payload, context_features=described["context_features"],
            sequence_features=described["sequence_features"])
        theirs = {**context, **lists}
        assert set(o) == set(theirs) == {"id", "title", "tok", "ragged", "frames", "pairs", "xy"}
        for key, value in theirs.items():
            assert flat(o[key]) == flat(value), key


def test_inspect_names_serialized_tensors_and_their_spec_reads_them(tmp_path, capsys):
    """Bytes features holding tf.io.serialize_tensor output: inspect says so,
    with the dtype and TF's parse_tensor hint; the printed spec reads values
    equal to TF's parse_tensor of the same bytes, and TF parses the printed
    description."""
    path = tmp_path / "t.tfrecord"
    tensors = [tf.reshape(tf.range(6 * (i + 1), dtype=tf.float32), (2, -1)) for i in range(4)]
    with tf.io.TFRecordWriter(str(path)) as w:
        for i, t in enumerate(tensors):
            feature = {"t": strings([tf.io.serialize_tensor(t).numpy()]), "id": int64s([i])}
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "serialized float32 tensors, 38-110 B" in text
    assert "tf.io.parse_tensor(x, out_type=tf.float32)" in text
    description = eval(block(text, "schema"), {"tf": tf})
    spec = eval(block(text, "tfrecord_torch spec"), imported(text))
    assert type(spec["t"]).__name__ == "SerializedTensor"
    ours = list(tfrecord_torch.TFRecordDataset(str(path), features=spec))
    for o, t, raw in zip(ours, tensors, tf.data.TFRecordDataset(str(path))):
        parsed = tf.io.parse_single_example(raw, description)
        assert np.array_equal(o["t"].numpy(), tf.io.parse_tensor(parsed["t"], tf.float32).numpy())
        assert np.array_equal(o["t"].numpy(), t.numpy())


def test_inspect_counts_records_that_are_serialized_tensors(tmp_path, capsys):
    """Records that are tf.io.serialize_tensor's output, with no Example around them,
    parse as Examples with no features: inspect counts them as serialized tensors (not
    as parsed Examples) and names the way to read them; the JSON report counts them too."""
    path = tmp_path / "t.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(5):
            w.write(tf.io.serialize_tensor(tf.fill((2, 3), float(i))).numpy())
        w.write(tf.train.Example().SerializeToString())  # an empty Example: parsed, not a tensor
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "records: 6 (parsed 1, 5 serialized tensors)" in text
    assert "features=Payload(decode=parse_tensor)" in text
    assert main(["inspect", "--json", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["parsed"], report["serialized_tensors"], report["not_examples"]) == (1, 5, 0)
