"""Every module of the package can be traced to its tests: a test file named after it
(``tests/unit/<subpackage>/test_<module>.py``) or a line in the test index,
``tests/README.md``, naming test files that exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "tests" / "README.md"
LINE = re.compile(r"^- `(tfrecord_torch/[\w/]+\.py)`: (.*)$")
TEST_FILE = re.compile(r"`(tests/[\w/]+\.py)`")


def modules() -> list[str]:
    package = ROOT / "tfrecord_torch"
    return sorted(str(p.relative_to(ROOT)) for p in package.rglob("*.py"))


def mirror(module: str) -> Path:
    """tfrecord_torch/records/crc.py -> tests/unit/records/test_crc.py."""
    parts = Path(module).relative_to("tfrecord_torch").parts
    return ROOT / "tests" / "unit" / Path(*parts[:-1], f"test_{parts[-1]}")


def index_lines() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for line in INDEX.read_text().splitlines() if (m := LINE.match(line))]


def test_every_module_has_a_test_file_named_after_it_or_an_index_line():
    listed = {module for module, _ in index_lines()}
    untraced = [m for m in modules() if not mirror(m).exists() and m not in listed]
    assert not untraced, (f"no test file named after these modules (tests/unit/<subpackage>/test_<module>.py) "
                          f"and no line for them in tests/README.md: {untraced}")


def test_index_lines_name_existing_modules_and_test_files():
    lines = index_lines()
    assert lines, f"no '- `tfrecord_torch/...py`: `tests/...py`' lines in {INDEX}"
    existing = set(modules())
    stale = [module for module, _ in lines if module not in existing]
    assert not stale, f"tests/README.md lists modules that no longer exist: {stale}"
    seen: set[str] = set()
    twice = [module for module, _ in lines if module in seen or seen.add(module)]
    assert not twice, f"tests/README.md lists these modules twice: {twice}"
    for module, where in lines:
        named = TEST_FILE.findall(where)
        assert named, f"tests/README.md: the line for {module} names no test file"
        missing = [path for path in named if not (ROOT / path).is_file()]
        assert not missing, f"tests/README.md: the line for {module} names missing files {missing}"


def test_the_check_reads_the_index_as_written():
    """The line format and the mirrored path the checks above rely on."""
    assert mirror("tfrecord_torch/records/crc.py") == ROOT / "tests/unit/records/test_crc.py"
    assert mirror("tfrecord_torch/policy.py") == ROOT / "tests/unit/test_policy.py"
    module, where = LINE.match("- `tfrecord_torch/io/http.py`: `tests/a/test_b.py` (note), `tests/c.py`").groups()
    assert module == "tfrecord_torch/io/http.py"
    assert TEST_FILE.findall(where) == ["tests/a/test_b.py", "tests/c.py"]
