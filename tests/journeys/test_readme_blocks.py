"""Every ```python block of README.md runs as written, imports included.

The blocks are read from the README itself, so a new block is tested as soon as it is
written. Each runs in its own Python process (so it imports what it uses, as a reader's
script must), in a fresh folder holding the data its paths name, made here with this
library's writers. Where a block's line says ``# prints X``, what the block prints must be
those lines, in order. A block that cannot run here (a cluster, a download, TensorFlow's
side) has ``<!-- not run: REASON; covered by tests/FILE.py::TEST -->`` just above it, and
the test it names must exist.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torchvision
from PIL import Image as PILImage

import tfrecord_torch as tt

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TIMEOUT = 180  # seconds per block; each takes a few (mostly importing torch)


class Block(NamedTuple):
    """One fenced code block of the README."""

    heading: str  # the nearest heading above it
    index: int  # its number among the README's python blocks
    line: int  # 1-based line of its opening fence
    code: str
    not_run: str | None  # the text of a `<!-- not run: ... -->` comment just above it


_FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*([^`\s]*)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$")


def readme_blocks(text: str) -> list[Block]:
    """The README's ```python blocks.

    Fences as CommonMark has them: ``` or ~~~, closed by a run of the same character at least
    as long; a fence indented in a list item has that indentation removed from its lines.
    """
    blocks: list[Block] = []
    heading, previous = "", ""
    indent, fence, language = "", "", ""
    start, body = 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if fence:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                if language == "python":
                    marker = _NOT_RUN.match(previous)
                    blocks.append(Block(heading, len(blocks), start, "\n".join(body) + "\n",
                                        marker.group(1) if marker else None))
                fence, previous = "", line
            else:
                body.append(line[len(indent):] if line.startswith(indent) else line.lstrip(" "))
            continue
        opening = _FENCE.match(line)
        if opening:
            indent, fence, language = opening.groups()
            language, start, body = language.lower(), number, []
            continue
        title = _HEADING.match(line)
        if title:
            heading = title.group(1)
        if line.strip():
            previous = line
    assert not fence, f"README.md: the code block opened on line {start} is never closed"
    return blocks


def _block_id(block: Block) -> str:
    return f"{block.index}-{re.sub(r'[^a-z0-9]+', '-', block.heading.lower()).strip('-')}"


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
RUN = [b for b in BLOCKS if b.not_run is None]
NOT_RUN = [b for b in BLOCKS if b.not_run is not None]


# --- the data the blocks name, made once per module --------------------------------------------

def _jpeg(rng: np.random.Generator, height: int, width: int) -> bytes:
    buf = io.BytesIO()
    PILImage.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


def _image_shards(root: Path) -> None:
    """`data/train-*.tfrecord`: TFDS-style records (`image` JPEG of mixed sizes, `label`), 2 shards."""
    rng = np.random.default_rng(0)
    (root / "data").mkdir(exist_ok=True)
    for s in range(2):
        with tt.RecordWriter(root / "data" / f"train-{s:05d}-of-00002.tfrecord") as w:
            for i in range(40):
                size = rng.integers(24, 64, 2)
                w.write(tt.make_example({"image": _jpeg(rng, *size), "label": (40 * s + i) % 10}))


def _described_records(root: Path) -> None:
    """`data/*.tfrecord`: the features of the README's TF feature description (label sometimes absent)."""
    rng = np.random.default_rng(1)
    (root / "data").mkdir(exist_ok=True)
    with tt.RecordWriter(root / "data" / "part-0.tfrecord") as w:
        for i in range(40):
            n = int(rng.integers(1, 5))
            fields = {
                "vec": rng.random(3, dtype=np.float32),
                "var": rng.integers(0, 100, n),
                "words": [f"w{j}".encode() for j in range(n)],
                "steps": rng.random(2 * n, dtype=np.float32),
                "idx": rng.choice(6, n, replace=False),
                "val": rng.random(n, dtype=np.float32),
            }
            if i % 3:
                fields["label"] = i
            w.write(tt.make_example(fields))


def _sequence_records(root: Path) -> None:
    """`seq.tfrecord`: SequenceExamples, context `label`, feature lists `tokens` and `frames` (3 floats)."""
    rng = np.random.default_rng(2)
    with tt.RecordWriter(root / "seq.tfrecord") as w:
        for i in range(20):
            steps = int(rng.integers(1, 7))
            w.write(tt.make_sequence_example(
                context={"label": i % 4},
                feature_lists={"tokens": [int(t) for t in rng.integers(0, 50, steps)],
                               "frames": [rng.random(3, dtype=np.float32) for _ in range(steps)]}))


def _segmentation_records(root: Path) -> None:
    """`seg.tfrecord`: the classic raw layout (`height`, `width`, `image_raw` HWC, `mask_raw` HW)."""
    rng = np.random.default_rng(3)
    with tt.RecordWriter(root / "seg.tfrecord") as w:
        for _ in range(16):
            h, wd = (int(v) for v in rng.integers(40, 80, 2))
            w.write(tt.make_example({
                "height": h, "width": wd,
                "image_raw": rng.integers(0, 256, (h, wd, 3), dtype=np.uint8).tobytes(),
                "mask_raw": rng.integers(0, 5, (h, wd), dtype=np.uint8).tobytes(),
            }))


def _detection_records(root: Path) -> None:
    """`od.tfrecord`: TF Object Detection API records, 1-3 boxes each."""
    rng = np.random.default_rng(4)
    with tt.RecordWriter(root / "od.tfrecord") as w:
        for _ in range(16):
            h, wd = (int(v) for v in rng.integers(40, 80, 2))
            n = int(rng.integers(1, 4))
            lo = rng.uniform(0.0, 0.5, (n, 2)).astype(np.float32)
            hi = (lo + rng.uniform(0.2, 0.5, (n, 2))).clip(0, 1).astype(np.float32)
            labels = rng.integers(1, 4, n)
            w.write(tt.make_example({
                "image/encoded": _jpeg(rng, h, wd), "image/format": b"jpeg",
                "image/height": h, "image/width": wd,
                "image/object/bbox/xmin": lo[:, 0], "image/object/bbox/ymin": lo[:, 1],
                "image/object/bbox/xmax": hi[:, 0], "image/object/bbox/ymax": hi[:, 1],
                "image/object/class/label": labels,
                "image/object/class/text": [f"class{k}".encode() for k in labels],
            }))


def _photo_folder(root: Path) -> None:
    """`photos`: an ImageFolder of JPEG files of mixed sizes in 2 class folders."""
    rng = np.random.default_rng(5)
    for c in ("cat", "dog"):
        (root / "photos" / c).mkdir(parents=True, exist_ok=True)
        for i in range(6):
            (root / "photos" / c / f"{i}.jpg").write_bytes(_jpeg(rng, *rng.integers(24, 64, 2)))


def _converted_photos(root: Path) -> None:
    """`records/photos/*-of-*`: the photos folder as `write_dataset` converts it."""
    _photo_folder(root / "source")
    tt.write_dataset(torchvision.datasets.ImageFolder(root / "source" / "photos"), root / "records" / "photos",
                     name="photos", execution=tt.Execution(progress=False))
    shutil.rmtree(root / "source")


# A block gets each of these whose path it names as a string literal ("data/train-*.tfrecord").
DATA = {
    "data/train-*.tfrecord": _image_shards,
    "data/*.tfrecord": _described_records,
    "seq.tfrecord": _sequence_records,
    "seg.tfrecord": _segmentation_records,
    "od.tfrecord": _detection_records,
    "photos": _photo_folder,
    "records/photos/*-of-*": _converted_photos,
}


@pytest.fixture(scope="module")
def data_sources(tmp_path_factory) -> dict[str, Path]:
    """Each data set of DATA in a folder of its own, written once for the module."""
    sources = {}
    for n, (path, make) in enumerate(DATA.items()):
        folder = tmp_path_factory.mktemp(f"readme-data-{n}")
        make(folder)
        sources[path] = folder
    return sources


def run_block(code: str, folder: Path, sources: dict[str, Path]) -> subprocess.CompletedProcess:
    """Run ``code`` as a script in a fresh ``folder/work`` holding the data its paths name."""
    work = folder / "work"
    work.mkdir()
    for path, source in sources.items():
        if f'"{path}"' in code or f"'{path}'" in code:
            shutil.copytree(source, work, dirs_exist_ok=True)
    script = folder / "block.py"  # outside the working folder, so no glob of the block's sees it
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ, TFRECORD_TORCH_CACHE=str(folder / "cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    # Warnings are errors, as in the suite; a core count below the blocks' num_workers=2 is not the README's fault.
    warnings = ["-W", "error", "-W", "ignore:This DataLoader will create:UserWarning"]
    return subprocess.run([sys.executable, *warnings, str(script)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


def _printed(code: str) -> list[str]:
    """The lines a block says it prints: the text after ``# prints`` on each of its lines, in order."""
    return [m.group(1) for m in re.finditer(r"#\s*prints\s+(.*?)\s*$", code, re.M)]


@pytest.mark.parametrize("block", RUN, ids=_block_id)
def test_readme_block_runs_as_written(block, data_sources, tmp_path):
    """The block runs without an error or a warning, and prints what its ``# prints`` comments say."""
    proc = run_block(block.code, tmp_path, data_sources)
    where = f"README.md line {block.line} ({block.heading})"
    assert proc.returncode == 0, (f"{where} failed (the data it reads comes from DATA in "
                                  f"{Path(__file__).name}):\n{proc.stdout}{proc.stderr}")
    expected = _printed(block.code)
    if expected:
        assert proc.stdout.splitlines() == expected, f"{where} printed:\n{proc.stdout}"


@pytest.mark.parametrize("block", NOT_RUN, ids=_block_id)
def test_a_block_not_run_names_the_test_that_covers_it(block):
    """A block left out says why, and names a test that exists."""
    match = re.fullmatch(r"(.+?);\s*covered by\s+(tests/[\w/]+\.py)::(\w+)", block.not_run or "")
    assert match, (f"README.md line {block.line}: write the marker as "
                   f"'<!-- not run: REASON; covered by tests/FILE.py::TEST -->', not {block.not_run!r}")
    path = ROOT / match.group(2)
    assert path.is_file(), f"README.md line {block.line}: {match.group(2)} does not exist"
    assert re.search(rf"^(async )?def {match.group(3)}\(", path.read_text(encoding="utf-8"), re.M), (
        f"README.md line {block.line}: {match.group(2)} has no test {match.group(3)}")


@pytest.mark.parametrize("block", BLOCKS, ids=_block_id)
def test_every_block_compiles(block):
    """Blocks not run are Python still."""
    compile(block.code, f"README.md line {block.line}", "exec")


def test_the_readme_has_its_blocks():
    """Blocks are found and run, and every `not run` marker sits just above a ```python block."""
    text = README.read_text(encoding="utf-8")
    assert RUN and NOT_RUN
    assert len(NOT_RUN) == sum(1 for line in text.splitlines() if _NOT_RUN.match(line)), (
        "a `<!-- not run: ... -->` comment must sit just above a ```python block")


def test_the_conversion_block_runs_with_fakedata_for_cifar10(data_sources, tmp_path):
    """The README's conversion block, with FakeData of CIFAR10's shape for the download (no network here)."""
    download = 'torchvision.datasets.CIFAR10("data", train=True, download=True)'
    [block] = [b for b in BLOCKS if download in b.code]
    code = block.code.replace(download, "torchvision.datasets.FakeData(40, image_size=(3, 32, 32), num_classes=10)")
    code += 'print(len(ds), sorted(os.listdir("records/photos")))\n'
    proc = run_block("import os\n" + code, tmp_path, data_sources)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "40 ['dataset_info.json', 'features.json', 'index', 'label.labels.txt', "
        "'photos-train.tfrecord-00000-of-00001']"]
