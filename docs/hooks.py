"""MkDocs hook: serve the benchmark's own chart from benchmarks/results/, so the docs never hold a copy."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
# site path -> file in the repository, outside docs/
GENERATED = {"benchmarks/results.png": ROOT / "benchmarks" / "results" / "results.png"}


def on_files(files, config):
    for site_path, source in GENERATED.items():
        files.append(File.generated(config, site_path, abs_src_path=str(source)))
    return files
