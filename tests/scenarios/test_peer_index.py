"""Interoperability with the ``tfrecord`` PyPI package (a peer implementation).

The ``tfrecord`` package registers ``tensorflow.Example`` in protobuf's default
pool, which collides with TensorFlow's copy ("duplicate symbol"), and pytest
runs every test file in one process. So the peer is only ever imported in a
fresh interpreter (``subprocess.run([sys.executable, "-c", ...])``); data goes
in and out through pickle files holding only bytes, numpy arrays and lists.

A peer suite: slow (``bash dev.sh test --all``); the index format is checked fast
in tests/unit/records/test_index.py.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tfrecord_torch import (
    IndexedReader,
    IndexMismatchError,
    RecordWriter,
    build_index,
    check_index,
    load_index,
    make_example,
    make_sequence_example,
    parse_example,
    parse_sequence_example,
    read_records,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OVERHEAD = 16

_PRELUDE = """
import pickle, sys
import numpy as np
import tfrecord
from tfrecord.tools.tfrecord2idx import create_index
from tfrecord.reader import example_loader, sequence_loader, tfrecord_iterator, tfrecord_loader
from tfrecord.writer import TFRecordWriter
assert "tensorflow" not in sys.modules
with open(sys.argv[1], "rb") as f:
    args = pickle.load(f)
result = None
"""

_EPILOGUE = """
with open(sys.argv[2], "wb") as f:
    pickle.dump(result, f)
"""


def run_peer(folder: Path, body: str, args=None):
    """Run ``body`` in a fresh interpreter with the tfrecord package imported.

    ``args`` is available there as ``args``; whatever the body stores in
    ``result`` is returned.
    """
    folder.mkdir(parents=True, exist_ok=True)
    inp, out = folder / "peer_args.pkl", folder / "peer_result.pkl"
    inp.write_bytes(pickle.dumps(args))
    code = _PRELUDE + textwrap.dedent(body) + _EPILOGUE
    try:
        subprocess.run([sys.executable, "-c", code, str(inp), str(out)], check=True, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    except subprocess.CalledProcessError as e:
        raise AssertionError(f"peer subprocess failed:\n{e.stderr[-4000:]}") from e
    return pickle.loads(out.read_bytes())


def expected_index(payloads) -> np.ndarray:
    sizes = np.array([len(p) + OVERHEAD for p in payloads], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else sizes
    return np.stack([offsets, sizes], axis=1) if len(sizes) else np.zeros((0, 2), np.int64)


def write(path, payloads, compression=None) -> None:
    with RecordWriter(path, compression=compression) as writer:
        for payload in payloads:
            writer.write(payload)


def assert_values_equal(got, want, where=""):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), (where, got)
        assert got.dtype == want.dtype and got.shape == want.shape, (where, got, want)
        if want.dtype == np.float32:
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=where)
        else:
            np.testing.assert_array_equal(got, want, err_msg=where)
    else:
        assert isinstance(got, list) and got == want, (where, got, want)


def from_peer(value):
    """A value from the peer's loaders in our decoded form.

    The peer returns a one-element bytes list as bytes and a longer one as a
    numpy bytes array (which drops trailing NULs, so the data avoids them).
    """
    if isinstance(value, bytes):
        return [value]
    if value.dtype.kind == "S":
        return [bytes(v) for v in value.tolist()]
    return value


# --------------------------------------------------------------------------- a corpus of files we write


def _corpus_payloads() -> dict[str, list[bytes]]:
    rng = np.random.default_rng(7)
    corpus = {
        "mixed": (
            [b"", b"a", b""]
            + [rng.bytes(40) for _ in range(20)]
            + [b""] * 10
            + [rng.bytes(int(n)) for n in rng.integers(0, 5000, 30)]
            + [rng.bytes(300 * 1024)]
            + [rng.bytes(200_000) for _ in range(6)]
            + [rng.bytes(2 * 1024 * 1024), b""]
            + [rng.bytes(40) for _ in range(9)]
        ),
        "empty_file": [],
        "one_empty_record": [b""],
        "one_record": [b"hello"],
        "two_records": [b"", b"x" * 70_000],
        "equal_run": [rng.bytes(50) for _ in range(1000)],
        "examples": [make_example({"id": i, "x": np.full(i % 5, i, np.float32), "s": f"r{i}"})
                     for i in range(200)],
    }
    for k in range(10):
        count = int(rng.integers(0, 150))
        big = rng.random(count) < 0.05
        lengths = np.where(big, rng.integers(0, 400_000, count), rng.integers(0, 120, count))
        corpus[f"random_{k}"] = [rng.bytes(int(n)) for n in lengths]
    return corpus


CORPUS = _corpus_payloads()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Files we write, indexed by us and by the peer, and read back by the peer.

    One subprocess serves every file: it writes the peer's index of each, reads
    each through the peer's iterator, and reads each again in shards located
    by *our* index.
    """
    folder = tmp_path_factory.mktemp("corpus")
    jobs = {}
    for name, payloads in CORPUS.items():
        path = folder / f"{name}.tfrecord"
        write(path, payloads)
        ours = build_index(path, folder / f"{name}.ours.idx")
        jobs[name] = {"path": str(path), "ours": ours, "peer": str(folder / f"{name}.peer.idx"),
                      "count": len(payloads)}
    result = run_peer(folder / "peer", """
        result = {}
        for name, job in args.items():
            create_index(job["path"], job["peer"])
            records = [bytes(r) for r in tfrecord_iterator(job["path"])]
            shards = None
            if job["count"] >= 2:  # the peer's np.loadtxt needs 2+ lines for a 2-D index
                shards = [[bytes(r) for r in tfrecord_iterator(job["path"], job["ours"], shard=(i, 3))]
                          for i in range(3)]
            result[name] = {"records": records, "shards": shards}
    """, jobs)
    return {name: dict(jobs[name], **result[name]) for name in jobs}


NAMES = list(CORPUS)


@pytest.mark.parametrize("name", NAMES)
def test_peer_index_loads_and_checks(corpus, name):
    job = corpus[name]
    index = load_index(job["peer"])
    assert index.dtype == np.int64
    np.testing.assert_array_equal(index, expected_index(CORPUS[name]))
    check_index(index, job["path"], index_path=job["peer"])


@pytest.mark.parametrize("name", NAMES)
def test_indexed_reader_with_peer_index(corpus, name):
    job = corpus[name]
    streamed = list(read_records(job["path"]))
    assert streamed == CORPUS[name]
    with IndexedReader(job["path"], index=job["peer"]) as reader:
        assert len(reader) == len(streamed)
        assert [reader[i] for i in range(len(reader))] == streamed
        order = np.random.default_rng(1).permutation(len(reader)).tolist()
        assert [reader[i] for i in order] == [streamed[i] for i in order]


@pytest.mark.parametrize("name", NAMES)
def test_our_index_identical_to_peer(corpus, name):
    ours, peer = Path(corpus[name]["ours"]).read_bytes(), Path(corpus[name]["peer"]).read_bytes()
    assert ours == peer
    assert len(ours.splitlines()) == len(CORPUS[name])


@pytest.mark.parametrize("name", NAMES)
def test_peer_reads_our_records(corpus, name):
    assert corpus[name]["records"] == CORPUS[name]


@pytest.mark.parametrize("name", [n for n in NAMES if len(CORPUS[n]) >= 2])
def test_peer_shards_with_our_index(corpus, name):
    shards = corpus[name]["shards"]
    assert [r for shard in shards for r in shard] == CORPUS[name]
    assert all(len(shard) in (len(CORPUS[name]) // 3, len(CORPUS[name]) // 3 + 1) for shard in shards)


def test_peer_index_of_changed_file_is_rejected(corpus, tmp_path):
    job = corpus["examples"]
    index = load_index(job["peer"])
    path = tmp_path / "grown.tfrecord"
    write(path, CORPUS["examples"] + [b"one more"])
    with pytest.raises(IndexMismatchError) as info:
        check_index(index, path, index_path=job["peer"])
    assert info.value.index_path == job["peer"] and info.value.path == str(path)
    with pytest.raises(IndexMismatchError):
        IndexedReader(path, index=job["peer"])
    # The same index, shifted by one record, no longer tiles the original file.
    with pytest.raises(IndexMismatchError):
        check_index(index[1:], job["path"], index_path=job["peer"])


# --------------------------------------------------------------------------- examples we write, peer parses

ROWS = [
    {
        "id": i,
        "neg": [-(2**63), 2**63 - 1, -i],
        "x": np.linspace(-1, 1, 4, dtype=np.float32) * i,
        "special": np.array([np.nan, np.inf, -np.inf, -0.0], np.float32),
        "name": f"row-{i}-é",
        "blob": bytes([i % 256]) * (i % 4) + b"\xff\x00",  # one element: trailing NULs survive
        "tags": [b"a", b"\x00b", b"c" * (i + 1)],  # no trailing NULs (see from_peer)
    }
    for i in range(25)
]


SEQUENCES = [
    (
        {"id": i, "title": f"seq {i}"},
        {
            "tokens": [[1, 2, 3], [4], np.arange(i + 1)],
            "frames": np.arange(6 * (i + 1), dtype=np.float32).reshape(-1, 3),
            "words": [b"x", b"yy", "z"],
        },
    )
    for i in range(8)
]


def _expected(row):
    return parse_example(make_example(row))


class PeerLoads(dict):
    """The peer's answers by job name, with the files it read and wrote."""

    sequences: Path
    written: Path
    written_index: Path


@pytest.fixture(scope="module")
def peer_loads(tmp_path_factory) -> PeerLoads:
    """What the peer's loaders make of our files, and the file (with its index) the peer
    writes: one subprocess answers the tests below, as ``corpus`` does for the index tests
    (each interpreter importing the peer imports torch: seconds)."""
    folder = tmp_path_factory.mktemp("peer-loads")
    jobs: dict = {}
    for compression in (None, "gzip"):
        path = folder / f"rows-{compression}.tfrecord"
        write(path, [make_example(r) for r in ROWS], compression)
        jobs[f"rows-{compression}"] = {"path": str(path), "compression": compression}
    loads = PeerLoads()
    loads.sequences = folder / "seq.tfrecord"
    write(loads.sequences, [make_sequence_example(c, f) for c, f in SEQUENCES])
    jobs["sequences"] = {"path": str(loads.sequences), "index": build_index(loads.sequences)}
    loads.written, loads.written_index = folder / "peer.tfrecord", folder / "peer.idx"
    jobs["written"] = {"path": str(loads.written), "index": str(loads.written_index), "n": 30}
    loads.update(run_peer(folder / "peer", """
        def rows(args):
            result = list(example_loader(args["path"], None, compression_type=args["compression"]))
            typed = list(tfrecord_loader(args["path"], None, compression_type=args["compression"],
                                         description={"id": "int", "x": "float", "name": "byte"}))
            return {"all": result, "typed": typed}

        def sequences(args):
            result = list(tfrecord_loader(args["path"], None, description=[], sequence_description=[]))
            sharded = [list(sequence_loader(args["path"], args["index"], shard=(i, 2))) for i in range(2)]
            return {"all": result, "sharded": sharded[0] + sharded[1]}

        def written(args):
            writer = TFRecordWriter(args["path"])
            for i in range(args["n"]):
                writer.write({
                    "id": (i, "int"),
                    "values": (list(range(-i, i)), "int"),
                    "score": ([0.5 * i, -1.0], "float"),
                    "label": (f"lbl{i}".encode(), "byte"),
                })
            writer.write({"c": (7, "int")}, {"steps": ([[1.0, 2.0], [3.0]], "float"),
                                             "names": ([b"p", b"q"], "byte")})
            writer.close()
            create_index(args["path"], args["index"])
            return [bytes(r) for r in tfrecord_iterator(args["path"])]

        result = {name: (rows if name.startswith("rows-") else globals()[name])(job) for name, job in args.items()}
    """, jobs))
    return loads


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_peer_example_loader_reads_our_examples(peer_loads, compression):
    peer = peer_loads[f"rows-{compression}"]

    assert len(peer["all"]) == len(ROWS)
    for got, row in zip(peer["all"], ROWS):
        want = _expected(row)
        assert set(got) == set(want)
        for key in want:
            assert_values_equal(from_peer(got[key]), want[key], key)
    # Spot-check against literal values, not just our own decoder.
    first = peer["all"][3]
    assert first["neg"].tolist() == [-(2**63), 2**63 - 1, -3]
    assert first["name"] == "row-3-é".encode()
    assert first["blob"] == b"\x03\x03\x03\xff\x00"
    assert np.isnan(first["special"][0]) and first["special"][1:].tolist() == [np.inf, -np.inf, 0.0]
    assert np.signbit(first["special"][3])
    for got, row in zip(peer["typed"], ROWS):
        assert set(got) == {"id", "x", "name"}
        assert got["id"].tolist() == [row["id"]]
        np.testing.assert_array_equal(got["x"], row["x"])


def test_peer_sequence_loader_reads_ours(peer_loads):
    path, peer = peer_loads.sequences, peer_loads["sequences"]

    for records in (peer["all"], peer["sharded"]):
        assert len(records) == len(SEQUENCES)
        for (got_context, got_lists), payload in zip(records, read_records(path)):
            context, lists = parse_sequence_example(payload)
            assert set(got_context) == set(context)
            for key in context:
                assert_values_equal(from_peer(got_context[key]), context[key], key)
            assert set(got_lists) == set(lists)
            for key in lists:
                assert len(got_lists[key]) == len(lists[key])
                for g, w in zip(got_lists[key], lists[key]):
                    assert_values_equal(from_peer(g), w, key)
    context, lists = peer["all"][2]
    assert context["id"].tolist() == [2] and context["title"] == b"seq 2"
    assert [t.tolist() for t in lists["tokens"]] == [[1, 2, 3], [4], [0, 1, 2]]
    assert [f.tolist() for f in lists["frames"]] == np.arange(18, dtype=np.float32).reshape(6, 3).tolist()


# --------------------------------------------------------------------------- files the peer writes, we read


def test_we_read_peer_written_file(peer_loads, tmp_path):
    path, peer_index, peer = peer_loads.written, peer_loads.written_index, peer_loads["written"]

    records = list(read_records(path))
    assert records == peer and len(records) == 31
    for i, payload in enumerate(records[:30]):
        parsed = parse_example(payload)
        assert_values_equal(parsed["id"], np.array([i], np.int64), "id")
        assert_values_equal(parsed["values"], np.arange(-i, i, dtype=np.int64), "values")
        assert_values_equal(parsed["score"], np.array([0.5 * i, -1.0], np.float32), "score")
        assert parsed["label"] == [f"lbl{i}".encode()]
    context, lists = parse_sequence_example(records[30])
    assert_values_equal(context["c"], np.array([7], np.int64))
    assert [s.tolist() for s in lists["steps"]] == [[1.0, 2.0], [3.0]]
    assert lists["names"] == [[b"p"], [b"q"]]

    # Our index of the peer's file is the peer's index of it, byte for byte.
    ours = build_index(path, tmp_path / "ours.idx")
    assert Path(ours).read_bytes() == peer_index.read_bytes()
    with IndexedReader(path, index=peer_index) as reader:
        assert [reader[i] for i in range(len(reader))] == records
