"""Every code block of README.md and docs/**/*.md runs as written, imports included.

The blocks are read from the pages themselves, so a new block is tested as soon as it is
written. A ```python block runs in a fresh namespace (so it imports what it uses, as a
reader's script must) with a fresh working folder holding the data its paths name (the samples of
``python -m tfrecord_torch.samples DIR``, which a reader makes to run the pages), and an index cache and a shard cache of its own (so a block's
`tfrecord-torch cache --clear` leaves yours alone); a ```bash block runs in bash there, with
the package's command on the PATH. Python blocks run in the test's process (torch is imported once, not once a
block: a process per block cost about 3 s of CPU each), except that the blocks importing
TensorFlow, and those importing the `tfrecord` package, run together in one process per
peer (neither can share a process with the other or with every test), and a block that
spawns workers (`if __name__ == "__main__":`) runs as a script; those scripts and the `tfrecord`
package's blocks are slow tests (see ``slow_block``). Where a line says ``# prints X``, what the
block prints must be those lines, in order. A block that cannot run here (a cluster, a
download) has ``<!-- not run: REASON; covered by tests/FILE.py::TEST -->`` just above it,
and the test it names must exist. Every fence names its language; only ``text`` and other
non-code fences are left alone.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from tfrecord_torch.samples import SAMPLES, write_samples

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TIMEOUT = 180  # seconds per block run in a process of its own
RUNNABLE = {"python", "bash"}
NOT_CODE = {"text", "toml", "yaml", "json", "ini", "console-output"}


class Block(NamedTuple):
    """One fenced code block of a page."""

    page: str  # its path, relative to the repository
    heading: str  # the nearest heading above it
    index: int  # its number among the page's runnable blocks
    line: int  # 1-based line of its opening fence
    language: str
    code: str
    not_run: str | None  # the text of a `<!-- not run: ... -->` comment just above it


_FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*([^`\s]*)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$")


def page_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The page's fenced blocks, runnable ones and the rest (their language says which).

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
                marker = _NOT_RUN.match(previous)
                runnable = sum(1 for b in blocks if b.language in RUNNABLE)
                blocks.append(Block(page, heading, runnable, start, language, "\n".join(body) + "\n",
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
    assert not fence, f"{page}: the code block opened on line {start} is never closed"
    return blocks


def _block_id(block: Block) -> str:
    page = re.sub(r"[^a-z0-9]+", "-", block.page.lower().removesuffix(".md")).strip("-")
    return f"{page}-{block.index}-{re.sub(r'[^a-z0-9]+', '-', block.heading.lower()).strip('-')}"


ALL = [b for page in PAGES for b in page_blocks(page.read_text(encoding="utf-8"),
                                                   page.relative_to(ROOT).as_posix())]
BLOCKS = [b for b in ALL if b.language in RUNNABLE]
RUN = [b for b in BLOCKS if b.not_run is None]
NOT_RUN = [b for b in BLOCKS if b.not_run is not None]


# --- the data the blocks name, made once per module --------------------------------------------
# The samples a reader makes with `python -m tfrecord_torch.samples DIR`: each in a folder of its
# own here, and a block gets each one whose path it names, in quotes or after a space, alone or
# followed by `/`.


@pytest.fixture(scope="module")
def data_sources(tmp_path_factory) -> dict[str, Path]:
    """Each sample of tfrecord_torch.samples in a folder of its own, written once for the module."""
    sources = {}
    for n, sample in enumerate(SAMPLES):
        folder = tmp_path_factory.mktemp(f"doc-data-{n}")
        write_samples(folder, [sample.path])
        sources[sample.path] = folder
    return sources


def _work_folder(code: str, folder: Path, sources: dict[str, Path]) -> Path:
    """``folder/work``, holding the data sets whose paths ``code`` names as string literals."""
    work = folder / "work"
    work.mkdir()
    for path, source in sources.items():
        if re.search(rf"""(^|["' ]){re.escape(path)}($|["'/\s])""", code, re.M):
            shutil.copytree(source, work, dirs_exist_ok=True)
    return work


def _env(folder: Path) -> dict[str, str]:
    return dict(os.environ, TFRECORD_TORCH_CACHE=str(folder / "cache"),
                TFRECORD_TORCH_SHARD_CACHE=str(folder / "shard-cache"),
                PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
                PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


# A core count below the blocks' num_workers=2 is not the page's fault.
_WARNINGS = ["-W", "error", "-W", "ignore:This DataLoader will create:UserWarning"]
_PEER = re.compile(r"^\s*(?:import|from)\s+(tensorflow|tfrecord)\b", re.M)
_MAIN = re.compile(r"__name__\s*==\s*.__main__.")


def peer_group(block: Block) -> str | None:
    """The peer a python block imports (TensorFlow or the `tfrecord` package), which cannot share
    the test's process: the blocks of one peer run together in one process of their own, so
    TensorFlow is imported once, not once a block."""
    match = _PEER.search(block.code)
    return match.group(1) if match and block.language == "python" and not _MAIN.search(block.code) else None


def runs_as_a_script(block: Block) -> bool:
    """Bash, and a python block that spawns workers (they import the parent's script)."""
    return block.language == "bash" or bool(_MAIN.search(block.code))


# Runs blocks one after another, each in a fresh namespace and its own folder. torchvision is
# imported first, as the docs say a process that imports TensorFlow must.
_GROUP_DRIVER = """
import contextlib, io, json, os, sys, traceback
import torchvision
jobs = json.load(open(sys.argv[1]))
results = []
for job in jobs:
    os.chdir(job["work"])
    os.environ["TFRECORD_TORCH_CACHE"] = job["cache"]
    os.environ["TFRECORD_TORCH_SHARD_CACHE"] = job["shard_cache"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(job["code"], job["where"], "exec"), {"__name__": "__doc_block__"})
        results.append({"ok": True, "output": out.getvalue()})
    except BaseException:
        results.append({"ok": False, "output": out.getvalue() + traceback.format_exc()})
json.dump(results, open(sys.argv[2], "w"))
"""


@pytest.fixture(scope="module")
def peer_runs(data_sources, tmp_path_factory):
    """``run(block)``: the block's (ok, output) from one process per peer, started at the first ask."""
    done: dict[str, dict[int, tuple[bool, str]]] = {}

    def run(block: Block) -> tuple[bool, str]:
        group = peer_group(block)
        assert group is not None
        if group not in done:
            members = [b for b in RUN if peer_group(b) == group]
            folder = tmp_path_factory.mktemp(f"doc-peer-{group}")
            jobs = []
            for n, member in enumerate(members):
                (folder / str(n)).mkdir()
                jobs.append({"code": member.code, "where": f"{member.page} line {member.line}",
                             "work": str(_work_folder(member.code, folder / str(n), data_sources)),
                             "cache": str(folder / str(n) / "cache"),
                             "shard_cache": str(folder / str(n) / "shard-cache")})
            (folder / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
            (folder / "driver.py").write_text(_GROUP_DRIVER, encoding="utf-8")
            proc = subprocess.run([sys.executable, *_WARNINGS, str(folder / "driver.py"), str(folder / "jobs.json"),
                                   str(folder / "results.json")], env=_env(folder), capture_output=True, text=True,
                                  timeout=TIMEOUT * len(members))
            assert proc.returncode == 0, f"the {group} blocks' process failed:\n{proc.stdout}{proc.stderr}"
            results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
            done[group] = {id(m): (r["ok"], r["output"]) for m, r in zip(members, results)}
        return done[group][id(block)]

    return run


def run_block(code: str, folder: Path, sources: dict[str, Path], language: str = "python") -> tuple[int, str]:
    """Run ``code`` as a script (or bash commands) in a fresh ``folder/work``; its exit status and output."""
    work = _work_folder(code, folder, sources)
    script = folder / "block.py"  # outside the working folder, so no glob of the block's sees it
    script.write_text(code, encoding="utf-8")
    command = ["bash", "-euo", "pipefail", str(script)] if language == "bash" else [
        sys.executable, *_WARNINGS, str(script)]
    proc = subprocess.run(command, cwd=work, env=_env(folder), capture_output=True, text=True, timeout=TIMEOUT)
    return proc.returncode, proc.stdout + (f"\n--- stderr:\n{proc.stderr}" if proc.returncode else "")


def exec_block(block: Block, folder: Path, sources: dict[str, Path], monkeypatch) -> str:
    """Run a python block in this process, in a fresh namespace and working folder; what it printed."""
    work = _work_folder(block.code, folder, sources)
    monkeypatch.chdir(work)
    monkeypatch.setenv("TFRECORD_TORCH_CACHE", str(folder / "cache"))
    monkeypatch.setenv("TFRECORD_TORCH_SHARD_CACHE", str(folder / "shard-cache"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.code, f"{block.page} line {block.line}", "exec"), {"__name__": "__doc_block__"})
    return out.getvalue()


def _printed(code: str) -> list[str]:
    """The lines a block says it prints: the text after ``# prints`` on each of its lines, in order."""
    return [m.group(1) for m in re.finditer(r"#\s*prints\s+(.*?)\s*$", code, re.M)]


def slow_block(block: Block) -> bool:
    """A block that starts interpreters beside the test's: a python script (its spawned
    DataLoader workers import torch too, about 20 s of CPU), a bash block (its commands: the
    quickstart's `python -m tfrecord_torch.samples .` about 10 s) and the peers' blocks (one
    process per peer: TensorFlow's about 30 s, the `tfrecord` package's about 10 s). These are
    slow tests: `bash dev.sh test --all` (and CI) runs them; the other blocks run in the fast set."""
    return peer_group(block) is not None or runs_as_a_script(block)


@pytest.mark.parametrize("block", [pytest.param(b, id=_block_id(b), marks=pytest.mark.slow) if slow_block(b)
                                   else b for b in RUN], ids=_block_id)
def test_doc_block_runs_as_written(block, data_sources, tmp_path, monkeypatch, peer_runs):
    """The block runs without an error or a warning, and prints what its ``# prints`` comments say."""
    where = f"{block.page} line {block.line} ({block.heading})"
    failed = f"{where} failed (the data it reads comes from tfrecord_torch/samples.py):\n"
    if runs_as_a_script(block):
        status, output = run_block(block.code, tmp_path, data_sources, block.language)
        assert status == 0, failed + output
    elif peer_group(block):
        ok, output = peer_runs(block)
        assert ok, failed + output
    else:
        output = exec_block(block, tmp_path, data_sources, monkeypatch)
    expected = _printed(block.code)
    if expected:
        assert output.splitlines() == expected, f"{where} printed:\n{output}"


@pytest.mark.parametrize("block", NOT_RUN, ids=_block_id)
def test_a_block_not_run_names_the_test_that_covers_it(block):
    """A block left out says why, and names a test that exists."""
    where = f"{block.page} line {block.line}"
    match = re.fullmatch(r"(.+?);\s*covered by\s+(tests/[\w/]+\.py)::(\w+)", block.not_run or "")
    assert match, (f"{where}: write the marker as "
                   f"'<!-- not run: REASON; covered by tests/FILE.py::TEST -->', not {block.not_run!r}")
    path = ROOT / match.group(2)
    assert path.is_file(), f"{where}: {match.group(2)} does not exist"
    assert re.search(rf"^(async )?def {match.group(3)}\(", path.read_text(encoding="utf-8"), re.M), (
        f"{where}: {match.group(2)} has no test {match.group(3)}")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "python"], ids=_block_id)
def test_every_python_block_compiles(block):
    """Blocks not run are Python still."""
    compile(block.code, f"{block.page} line {block.line}", "exec")


def test_every_fence_names_its_language():
    """A fence without a language (or with an unknown one) would be skipped silently."""
    unknown = [f"{b.page} line {b.line}: {b.language or '(none)'}" for b in ALL
               if b.language not in RUNNABLE | NOT_CODE]
    assert not unknown, f"fences must be one of {sorted(RUNNABLE | NOT_CODE)}: {unknown}"


def test_the_pages_have_their_blocks():
    """Blocks are found and run, and every `not run` marker sits just above a runnable block."""
    assert RUN and NOT_RUN
    markers = sum(1 for page in PAGES for line in page.read_text(encoding="utf-8").splitlines()
                  if _NOT_RUN.match(line))
    assert len(NOT_RUN) == markers, "a `<!-- not run: ... -->` comment must sit just above a ```python or ```bash block"


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_the_conversion_block_runs_with_fakedata_for_cifar10(data_sources, tmp_path):
    """The conversion block of docs/guide/writing.md, with FakeData of CIFAR10's shape for the download."""
    download = 'torchvision.datasets.CIFAR10("data", train=True, download=True)'
    [block] = [b for b in BLOCKS if download in b.code]
    code = block.code.replace(download, "torchvision.datasets.FakeData(40, image_size=(3, 32, 32), num_classes=10)")
    code += 'print(len(ds), sorted(os.listdir("records/photos")))\n'
    status, output = run_block("import os\n" + code, tmp_path, data_sources)
    assert status == 0, output
    assert output.splitlines() == [
        "40 ['dataset_info.json', 'features.json', 'index', 'label.labels.txt', "
        "'photos-train.tfrecord-00000-of-00001']"]
