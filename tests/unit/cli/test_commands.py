"""The ``tfrecord-torch`` subcommands (index, verify, inspect, head, cat, decompress):
their output, their exit codes, and errors as messages rather than tracebacks."""

import json
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
