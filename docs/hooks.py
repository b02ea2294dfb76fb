"""MkDocs hook: serve the benchmark's own chart from benchmarks/results/, so the docs never hold a copy."""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
# site path -> file in the repository, outside docs/
GENERATED = {"benchmarks/results.png": ROOT / "benchmarks" / "results" / "results.png"}


def on_files(files, config):
    for site_path, source in GENERATED.items():
        files.append(File.generated(config, site_path, abs_src_path=str(source)))
    return files


# The docstrings cross-reference in Sphinx's roles (:class:`~pkg.mod.Name`), which the
# Markdown renderer leaves as text: show them as the code they name, the short name for `~`.
_ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):<code>(~?)([^<]*)</code>")


def _code(match: re.Match) -> str:
    name = match.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if match.group(1) else name}</code>"


def on_page_content(html, page, config, files):
    return _ROLE.sub(_code, html)
