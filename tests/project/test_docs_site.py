"""The docs site builds with `mkdocs build --strict`: every page in the nav, no broken link,
anchor or API reference, and every docstring the reference shows parses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # seconds of interpreters or workers starting: CI's set
def test_the_docs_site_builds_strict(tmp_path):
    """A warning of MkDocs, mkdocstrings or griffe fails the build, and so this test."""
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",  # Material's notice about MkDocs 2, not about these docs
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (site / "index.html").is_file()
    assert (site / "search" / "search_index.json").is_file()
    api = (site / "reference" / "datasets" / "index.html").read_text(encoding="utf-8")
    assert 'id="tfrecord_torch.data.iterable.TFRecordDataset"' in api, "the API reference has no TFRecordDataset"
    assert (site / "benchmarks" / "results.png").is_file(), "the benchmark chart is not served"
