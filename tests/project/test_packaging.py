"""What a user installs: the sdist and wheel built from this tree (license, C
sources, tests left out), ``python -m tfrecord_torch``, and, in a slow test, a
``pip install`` into a virtual environment that already holds the oldest
torch / torchvision pair the dependency floors claim."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "pyproject.toml"), "rb") as _f:
    PYPROJECT = tomllib.load(_f)

BUILD = """
import sys
from setuptools import build_meta
out = sys.argv[2]
name = build_meta.build_sdist(out) if sys.argv[1] == "sdist" else build_meta.build_wheel(out)
print(name)
"""


def _source_copy(dest: str) -> str:
    """The tree as a fresh clone has it (tracked and new files, nothing ignored: no
    compiled helpers, no build folders), copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))
    return dest


def _build(kind: str, tmp_path) -> str:
    """Build ``kind`` ("sdist" or "wheel") from a copy of the tree with setuptools'
    PEP 517 hooks (the backend pip and ``python -m build`` call); returns the archive."""
    src = _source_copy(str(tmp_path / "src"))
    out = str(tmp_path / "dist")
    os.makedirs(out)
    proc = subprocess.run([sys.executable, "-c", BUILD, kind, out], cwd=src, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return os.path.join(out, proc.stdout.strip().splitlines()[-1])


def test_license_is_spdx_apache_and_the_file_holds_its_text():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


@pytest.mark.slow  # a build from a copy of the tree, and an interpreter: about 5 s of CPU
def test_wheel_ships_license_and_compiled_helpers_but_no_c_sources(tmp_path):
    wheel = _build("wheel", tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(licenses) == 1, names
        with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
            assert z.read(licenses[0]) == f.read()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        z.extractall(tmp_path / "site")
    assert "License-Expression: Apache-2.0" in metadata
    assert not [n for n in names if n.endswith((".c", ".h"))], "C sources belong in the sdist only"
    assert not [n for n in names if n.startswith(("tests/", "examples/", "benchmarks/"))]
    # the compiled helpers load from the unpacked wheel alone, without their sources
    probe = ("import tfrecord_torch.example._fastwire as f, tfrecord_torch.records._frames as r\n"
             "import tfrecord_torch as tt\n"
             "assert f.__file__.startswith(sys.argv[1]) and r.__file__.startswith(sys.argv[1])\n"
             "ex = tt.make_example({'label': 3})\n"
             "print(tt.parse_example(ex)['label'].tolist())\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    proc = subprocess.run([sys.executable, "-c", "import sys\n" + probe, str(tmp_path / "site")],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[3]"


@pytest.mark.slow  # a build from a copy of the tree
def test_sdist_carries_sources_license_and_changelog_and_leaves_the_tests_out(tmp_path):
    sdist = _build("sdist", tmp_path)
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for needed in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "setup.py",
                   "tfrecord_torch/example/_fastwire.c", "tfrecord_torch/records/_frames.c",
                   "tfrecord_torch/records/_crc32c.c", "tfrecord_torch/features/images/_jpegcrop.c",
                   "tfrecord_torch/py.typed"):
        assert needed in names, needed
    # the tests need examples/, benchmarks/, TensorFlow and the docs: they stay in the repository
    assert not [n for n in names if n.split("/")[0] in ("tests", "examples", "benchmarks", "docs")]
    assert not [n for n in names if n.endswith(".so")]


def test_python_m_tfrecord_torch_runs_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "tfrecord_torch", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: tfrecord-torch")
    for command in ("index", "verify", "inspect", "head", "convert"):
        assert command in proc.stdout
    version = subprocess.run([sys.executable, "-m", "tfrecord_torch", "--version"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.strip().endswith(PYPROJECT["project"]["version"])


def test_the_resume_extra_installs_torchdata():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert [r for r in extras["resume"] if r.startswith("torchdata")]


def _floor(name: str) -> str:
    """The version in ``name>=X`` among the package's dependencies."""
    for requirement in PYPROJECT["project"]["dependencies"]:
        m = re.fullmatch(rf"{re.escape(name)}\s*>=\s*([0-9.]+)", requirement)
        if m:
            return m.group(1)
    raise AssertionError(f"no floor for {name} in {PYPROJECT['project']['dependencies']}")


def _exact(floor: str) -> str:
    """A floor as an exact release: "2.13" -> "2.13.0"."""
    parts = floor.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _in_venv(venv: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run the venv's python with ``args``, outside this tree and without the test run's
    PYTHONPATH, so that what runs is what pip installed there."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run([os.path.join(venv, "bin", "python"), *args], cwd=os.path.dirname(venv), env=env,
                          capture_output=True, text=True, timeout=timeout)


def _pip(venv: str, *args: str) -> str:
    proc = _in_venv(venv, "-m", "pip", "install", *args, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _freeze(venv: str) -> dict[str, str]:
    out = _in_venv(venv, "-m", "pip", "list", "--format=freeze").stdout
    return dict(line.lower().split("==", 1) for line in out.splitlines() if "==" in line)


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_pip_install_keeps_the_users_oldest_supported_torch_pair(tmp_path):
    """A user's environment holds torch and torchvision at the floors pyproject.toml
    claims (a matched pair: the torchvision wheel requires that torch).
    ``pip install tfrecord_torch`` changes neither, nor any other package, and the
    demo runs on that pair. Then, with torch alone, the documented command (torch
    pinned on the command line, the ``resume`` extra) brings the matching
    torchvision and torchdata and keeps torch."""
    torch_version, vision_version = _exact(_floor("torch")), _exact(_floor("torchvision"))
    venv = str(tmp_path / "venv")
    src = _source_copy(str(tmp_path / "src"))
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    try:
        # PyPI's torch build: a CPU-only "+cpu" build (which a local wheel folder may offer)
        # cannot load PyPI's torchvision, whose compiled ops link torch's CUDA libraries
        _pip(venv, f"torch=={torch_version},!={torch_version}+cpu", f"torchvision=={vision_version}")
        before = _freeze(venv)
        assert (before["torch"], before["torchvision"]) == (torch_version, vision_version), before

        _pip(venv, src)
        after = _freeze(venv)
        changed = {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v}
        assert not changed, f"pip changed the user's packages: {changed}"
        assert "tfrecord-torch" in after or "tfrecord_torch" in after, sorted(after)

        where = _in_venv(venv, "-c", "import tfrecord_torch; print(tfrecord_torch.__file__)")
        assert where.returncode == 0 and where.stdout.startswith(venv), where.stdout + where.stderr
        demo = _in_venv(venv, os.path.join(src, "examples", "demo.py"), str(tmp_path / "demo"))
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        assert "every record once: True" in demo.stdout, demo.stdout

        # torch alone: the install page's command pins the torch that is there
        removed = _in_venv(venv, "-m", "pip", "uninstall", "-y", "torchvision", "tfrecord_torch")
        assert removed.returncode == 0, removed.stderr
        _pip(venv, f"{src}[resume]", f"torch=={torch_version}")
        pinned = _freeze(venv)
        assert (pinned["torch"], pinned["torchvision"]) == (torch_version, vision_version), pinned
        assert "torchdata" in pinned, sorted(pinned)
        probe = _in_venv(venv, "-c", "from torchdata.stateful_dataloader import StatefulDataLoader\n"
                                     "import tfrecord_torch as tt\nprint(tt.__version__)")
        assert probe.returncode == 0, probe.stderr
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # several GB of torch and CUDA libraries
