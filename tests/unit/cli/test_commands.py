"""The ``tfrecord-torch`` subcommands (index, verify, inspect, head, cat, decompress):
their output, their exit codes, and errors as messages rather than tracebacks."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from tfrecord_torch import RecordWriter, load_index, make_example, make_sequence_example
from tfrecord_torch.cli import main


@pytest.fixture
def shards(tmp_path):
    paths = []
    for s in range(2):
        path = tmp_path / f"d-{s}.tfrecord"
        with RecordWriter(path) as w:
            for i in range(10):
                w.write(make_example({"label": s * 10 + i, "x": np.full(4, i, np.float32),
                                      "name": f"n{i}", "img": b"\xff\xd8" + bytes(i),
                                      **({"opt": [1] * i} if i % 2 else {})}))
        paths.append(path)
    return paths


def test_index_with_glob(shards, capsys):
    assert main(["index", "-q", str(shards[0].parent / "d-*.tfrecord")]) == 0
    for p in shards:
        assert load_index(str(p) + ".index").shape == (10, 2)


def test_index_progress_and_a_bad_file(shards, tmp_path, capsys):
    junk = tmp_path / "junk.tfrecord"
    junk.write_bytes(b"this is not a record file")
    # Not quiet: a byte progress bar on stderr; the bad file is reported and the others indexed.
    assert main(["index", str(shards[0]), str(junk), str(shards[1])]) == 1
    out, err = capsys.readouterr()
    assert "100%" in err  # the bar reached the end, the bad file's bytes counted as read
    assert str(junk) in err and "not a TFRecord file: it looks like a text file" in err
    assert [line.split(":")[0] for line in out.splitlines()] == [str(shards[0]), str(shards[1])]
    for p in shards:
        assert load_index(str(p) + ".index").shape == (10, 2)
    assert not (tmp_path / "junk.tfrecord.index").exists()


@pytest.mark.parametrize("bad_at", [0, 1])
def test_index_ends_its_stderr_with_the_error_not_the_bar(shards, tmp_path, bad_at):
    """`tfrecord-torch index` with its progress bar, one file cut short: what the
    terminal shows last is the error, not the bar drawn again below it."""
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(shards[0].read_bytes()[:-30])
    files = [str(shards[0]), str(shards[1])]
    files.insert(bad_at, str(cut))
    proc = subprocess.run([sys.executable, "-m", "tfrecord_torch", "index", *files], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    shown = [piece.strip() for piece in re.split(r"[\r\n]", proc.stderr) if piece.strip()]
    assert shown[-1].startswith(f"tfrecord-torch index: error: {cut}: record 9 at byte offset "), shown[-3:]
    assert "100%" in shown[-2]  # the bar's last state, before the error
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == [str(shards[0]), str(shards[1])]


def test_verify_ok_and_corrupt(shards, capsys):
    assert main(["verify", *map(str, shards)]) == 0
    assert capsys.readouterr().out.count("OK ") == 2
    raw = bytearray(shards[1].read_bytes())
    raw[40] ^= 1
    shards[1].write_bytes(bytes(raw))
    assert main(["verify", *map(str, shards)]) == 1
    out = capsys.readouterr().out
    assert "CORRUPT" in out and "byte offset" in out and str(shards[1]) in out


def test_verify_reports_every_corrupt_record(shards, capsys):
    from tfrecord_torch import build_index
    offsets = load_index(build_index(shards[0]))[:, 0]
    raw = bytearray(shards[0].read_bytes())
    for record in (2, 7):  # a payload byte of each: the reader can skip past both
        raw[offsets[record] + 14] ^= 1
    shards[0].write_bytes(bytes(raw))
    junk = shards[0].parent / "junk.tfrecord"
    junk.write_bytes(b"this is not a record file")
    assert main(["verify", str(shards[0]), str(junk), str(shards[1])]) == 1
    out = capsys.readouterr().out.splitlines()
    corrupt = [line for line in out if line.startswith("CORRUPT")]
    assert [f"record {r} at byte offset {offsets[r]}" in line for r, line in zip((2, 7), corrupt)] == [True] * 2
    assert f"BAD     {shards[0]}: 8 good records, 2 error(s)" in "\n".join(out)
    assert any(str(junk) in line and "not a TFRecord file" in line for line in corrupt)  # and the next file is checked
    assert out[-1].startswith(f"OK      {shards[1]}: 10 records")


def test_verify_checks_index(shards, capsys):
    main(["index", "-q", str(shards[0])])
    with RecordWriter(shards[0]) as w:
        w.write(b"changed")
    assert main(["verify", str(shards[0])]) == 1
    assert "index" in capsys.readouterr().out


def test_inspect(shards, capsys):
    assert main(["inspect", "--json", *map(str, shards)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records"] == 20
    f = report["features"]
    assert f["label"] == {"kind": "int64", "present": 20, "min_length": 1, "max_length": 1, "fixed": True}
    assert f["x"]["kind"] == "float" and f["x"]["fixed"]
    assert f["opt"]["present"] == 10 and not f["opt"]["fixed"]
    assert main(["inspect", *map(str, shards)]) == 0
    text = capsys.readouterr().out
    assert "'label': tf.io.FixedLenFeature([], tf.int64)" in text
    assert "'opt': tf.io.VarLenFeature(tf.int64)" in text
    assert "'name': tf.io.FixedLenFeature([], tf.string)" in text
    assert "'label': Int64()," in text and "'opt': Int64(shape=None, default=[])," in text and "'name': Bytes()," in text


def test_head_and_cat(shards, capsys):
    assert main(["head", "-n", "2", "--full", str(shards[0])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["label"] == [0] and first["x"] == [0.0] * 4 and first["name"] == ["n0"]
    assert first["img"] == ["base64:/9g="]
    assert main(["cat", "--bytes", "length", *map(str, shards)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 20 and json.loads(lines[3])["img"] == ["<5 bytes>"]


def test_sequence_cat(tmp_path, capsys):
    path = tmp_path / "seq.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_sequence_example({"id": b"a"}, {"tok": [[1, 2], [3]]}))
    assert main(["cat", "--sequence", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == {"context": {"id": ["a"]},
                                                    "feature_lists": {"tok": [[1, 2], [3]]}}


def test_decompress_then_index(tmp_path, capsys):
    gz = tmp_path / "a.tfrecord.gz"
    with RecordWriter(gz, compression="gzip") as w:
        for i in range(5):
            w.write(make_example({"i": i}))
    assert main(["index", str(gz)]) == 1
    assert "decompress" in capsys.readouterr().err
    out = tmp_path / "a.tfrecord"
    assert main(["decompress", str(gz), str(out)]) == 0
    assert main(["index", "-q", str(out)]) == 0
    assert load_index(str(out) + ".index").shape == (5, 2)


def test_errors_are_messages_not_tracebacks(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tfrecord_torch.cli", "verify", str(tmp_path / "nope*")],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "no files match" in proc.stderr and "Traceback" not in proc.stderr


def test_globs_and_folders_skip_index_files(shards, capsys):
    main(["index", "-q", *map(str, shards)])
    capsys.readouterr()
    assert main(["verify", str(shards[0].parent / "*")]) == 0
    assert main(["verify", str(shards[0].parent)]) == 0
    out = capsys.readouterr().out
    assert out.count("OK ") == 4 and "CORRUPT" not in out


def test_console_script_help():
    import shutil

    exe = shutil.which("tfrecord-torch") or str(__import__("pathlib").Path(sys.executable).parent / "tfrecord-torch")
    for sub in ([], ["index"], ["verify"], ["inspect"], ["head"], ["cat"], ["decompress"]):
        proc = subprocess.run([exe, *sub, "--help"], capture_output=True, text=True)
        assert proc.returncode == 0 and "usage: tfrecord-torch" in proc.stdout


def test_head_and_inspect_show_feature_lists(tmp_path, capsys):
    """SequenceExamples read without --sequence: head prints context and
    feature lists; inspect reports each list's kind, steps and width."""
    path = tmp_path / "seq.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_sequence_example({"id": b"a"}, {"tok": [[1], [2], [3]], "xy": [[0.5, 1.0]]}))
        w.write(make_sequence_example({"id": b"b"}, {"tok": [[4]]}))
    assert main(["head", str(path)]) == 0
    first, second = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert first == {"context": {"id": ["a"]}, "feature_lists": {"tok": [[1], [2], [3]], "xy": [[0.5, 1.0]]}}
    assert second == {"context": {"id": ["b"]}, "feature_lists": {"tok": [[4]]}}
    assert main(["inspect", "--json", str(path)]) == 0
    lists = json.loads(capsys.readouterr().out)["feature_lists"]
    assert lists["tok"] == {"kind": "int64", "present": 2, "min_steps": 1, "max_steps": 3, "min_width": 1,
                            "max_width": 1, "fixed_width": True}
    assert lists["xy"]["kind"] == "float" and lists["xy"]["present"] == 1 and lists["xy"]["max_width"] == 2
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "'tok': Int64()," in text and "'xy': Float(shape=(2,), default=None)," in text
    assert "'xy': tf.io.FixedLenSequenceFeature([2], tf.float32, allow_missing=True)," in text


def test_head_summarises_long_and_binary_bytes(tmp_path, capsys):
    """Short printable UTF-8 prints as text; longer or binary values as
    their length and, when known, format; --full prints them whole."""
    from helpers import png_bytes

    jpeg = png_bytes(np.zeros((16, 16, 3), np.uint8), "JPEG")
    values = {"short": "héllo wörld", "long": "x" * 65, "edge": "y" * 64, "binary": b"\x00\x01\xff",
              "control": "\x07bell", "lines": "a\tb\nc", "jpeg": jpeg, "many": [b"a", jpeg]}
    path = tmp_path / "b.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_example(values))
    assert main(["head", str(path)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got == {"short": ["héllo wörld"], "long": ["<65 bytes>"], "edge": ["y" * 64], "binary": ["<3 bytes>"],
                   "control": ["<5 bytes>"], "lines": ["a\tb\nc"], "jpeg": [f"<{len(jpeg)} bytes, JPEG>"],
                   "many": ["a", f"<{len(jpeg)} bytes, JPEG>"]}
    assert main(["head", "--full", str(path)]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["long"] == ["x" * 65] and full["binary"] == ["base64:AAH/"] and full["control"] == ["\x07bell"]
    assert main(["cat", "--bytes", "summary", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == got


def test_inspect_names_images_and_suggests_image(tmp_path, capsys):
    """Bytes features holding images: the table names the formats with
    their byte and pixel sizes; the spec suggests Image() for one image per
    record (default=None where some records lack it), Bytes(many=True) for
    several, and leaves values that are partly images as Bytes."""
    from helpers import png_bytes

    path = tmp_path / "i.tfrecord"
    with RecordWriter(path) as w:
        for i in range(4):
            pixels = np.full((10 + i, 20, 3), i * 50, np.uint8)
            w.write(make_example({
                "png": png_bytes(pixels), "either": png_bytes(pixels, "JPEG" if i % 2 else "PNG"),
                "pair": [png_bytes(pixels, "GIF"), png_bytes(pixels, "WEBP")],
                "partly": png_bytes(pixels) if i else b"plain", "label": i,
                **({"sometimes": png_bytes(pixels, "WEBP")} if i % 2 else {})}))
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ") and "/4" in line}
    assert rows["png"].endswith(" B, 20x10-20x13") and "PNG images, " in rows["png"]
    assert "JPEG+PNG images (mixed formats), " in rows["either"]
    assert "GIF+WebP images (mixed formats)" in rows["pair"]
    assert "PNG images, " in rows["partly"] and rows["partly"].endswith(", 3 of 4 values")
    assert rows["label"].rstrip().endswith("4/4")
    assert "'png': Image(),  # PNG images" in text and "'either': Image(),  # " in text
    assert "'sometimes': Image(default=None),  # WebP images" in text
    assert "'pair': Bytes(many=True),  # GIF+WebP images" in text
    assert "'partly': Bytes(),  # PNG images" in text
    assert "'png': tf.io.FixedLenFeature([], tf.string),  # PNG images" in text
    assert "tfrecord_torch spec (from tfrecord_torch import Bytes, Image, Int64):" in text
    assert main(["inspect", "--json", str(path)]) == 0
    features = json.loads(capsys.readouterr().out)["features"]
    content = features["png"]["content"]
    assert 0 < content.pop("min_bytes") <= content.pop("max_bytes")
    assert content == {"formats": {"PNG": 4}, "recognised": 4, "unrecognised": 0, "spec": "Image()",
                       "smallest": [20, 10], "largest": [20, 13]}
    assert "content" not in features["label"]


def test_a_new_sniffer_is_one_line(tmp_path, capsys, monkeypatch):
    """A sniffer appended to BYTES_SNIFFERS names its values in inspect's
    table and spec and in head, with nothing else changed."""
    from tfrecord_torch.cli import sniff
    from tfrecord_torch.example.schema import Content

    def magic(value):
        return Content("MAGIC", "blobs", "Magic()") if value.startswith(b"MAGIC") else None

    monkeypatch.setattr(sniff, "BYTES_SNIFFERS", [*sniff.BYTES_SNIFFERS, magic])
    path = tmp_path / "m.tfrecord"
    with RecordWriter(path) as w:
        w.write(make_example({"m": b"MAGIC" + bytes(100)}))
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "MAGIC blobs, 105 B" in text and "'m': Magic(),  # MAGIC blobs" in text
    assert "from tfrecord_torch import Magic" in text
    assert main(["head", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == {"m": ["<105 bytes, MAGIC>"]}


def test_inspect_spec_reads_records_that_lack_a_feature(tmp_path, capsys):
    """Features only some records hold: the printed spec reads every record,
    with the empty values TF's VarLenFeature gives where a key is missing."""
    from tfrecord_torch import Bytes, Float, Int64, TFRecordDataset  # noqa: F401 (the printed spec's names)

    path = tmp_path / "some.tfrecord"
    with RecordWriter(path) as w:
        for i in range(4):
            w.write(make_example({"id": i, **({"w": [0.5] * i, "tags": ["a"] * i, "one": i} if i % 2 else {})}))
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    start = text.index("{", text.index("tfrecord_torch spec"))
    spec = eval(text[start:text.index("\n}", start) + 2])
    items = list(TFRecordDataset(str(path), features=spec))
    assert [item["id"].item() for item in items] == [0, 1, 2, 3]
    assert [item["w"].tolist() for item in items] == [[], [0.5], [], [0.5] * 3]
    assert [item["tags"] for item in items] == [[], [b"a"], [], [b"a"] * 3]
    assert [item["one"].tolist() for item in items] == [[], [1], [], [3]]
