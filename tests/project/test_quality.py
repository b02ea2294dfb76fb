"""The package's shape: layering, types, lint, a lazy and light import, a complete public API."""

import inspect
import os
import shutil
import subprocess
import sys

import pytest

import tfrecord_torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def _tool(name: str) -> str:
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        path = shutil.which(name) or pytest.fail(f"{name} is not installed (pip install -e '.[test]')")
    return path


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600, **kw)


def test_layers_hold():
    """import-linter's contracts in pyproject.toml: imports only point down the data's path."""
    proc = _run([_tool("lint-imports"), "--no-cache"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_import_cycles():
    import grimp

    graph = grimp.build_graph("tfrecord_torch")
    modules = sorted(m for m in graph.modules if m.startswith("tfrecord_torch."))
    cycles = [(a, b) for a in modules for b in graph.find_modules_directly_imported_by(a)
              if b != a and graph.find_shortest_chain(importer=b, imported=a)]
    assert not cycles, cycles


def _layers() -> list[str]:
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    return next(c["layers"] for c in contracts if c["type"] == "layers")


def _named_modules(path: str) -> list[tuple[int, str]]:
    """The string constants in a module's code (not its docstrings) that
    name a module of the package: imports by name, which import-linter does not see."""
    import ast
    import re

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and re.fullmatch(r"tfrecord_torch(\.\w+)+", node.value)]


def test_imports_by_name_point_down_too():
    """A module named in a string (``importlib.import_module``, a lazy export
    table) counts as an import: it may name only its own layer or one below."""
    layers = _layers()

    def layer(module: str) -> int | None:
        return next((i for i, name in enumerate(layers) if module == name or module.startswith(name + ".")), None)

    wrong = []
    package = os.path.join(ROOT, "tfrecord_torch")
    for folder, _, files in os.walk(package):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            module = "tfrecord_torch." + os.path.relpath(path, package)[:-3].replace(os.sep, ".")
            mine = layer(module.removesuffix(".__init__"))
            if mine is None:  # the package's face sits above every layer
                continue
            for line, named in _named_modules(path):
                theirs = layer(named)
                if theirs is not None and theirs < mine:
                    wrong.append(f"{os.path.relpath(path, ROOT)}:{line} names {named}")
    assert not wrong, wrong


def test_mypy_clean():
    proc = _run([sys.executable, "-m", "mypy", "tfrecord_torch"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_clean():
    proc = _run([_tool("ruff"), "check", "tfrecord_torch", "tests", "benchmarks", "examples"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_all_is_sorted_and_every_name_resolves():
    names = tfrecord_torch.__all__
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(tfrecord_torch, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tfrecord_torch.nope  # noqa: B018


def _public_callables():
    for name in tfrecord_torch.__all__:
        obj = getattr(tfrecord_torch, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, member in vars(obj).items():
                if inspect.isfunction(member) and (not attr.startswith("_") or attr == "__init__"):
                    yield f"{name}.{attr}", member


def test_public_api_is_annotated():
    missing = []
    for name, fn in _public_callables():
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values()
                  if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if any(p.annotation is inspect.Parameter.empty for p in params):
            missing.append(f"{name}: parameters")
        if sig.return_annotation is inspect.Signature.empty:
            missing.append(f"{name}: return")
    assert not missing, missing


def test_py_typed_ships():
    assert os.path.exists(os.path.join(os.path.dirname(tfrecord_torch.__file__), "py.typed"))


LIGHT = """
import sys
import tfrecord_torch
from tfrecord_torch import read_records, RecordWriter, build_index, parse_example, make_example
from tfrecord_torch import load_index, IndexedReader, TFRecordError, ErrorPolicy, Compression
heavy = sorted(m for m in ("torch", "torchvision") if m in sys.modules)
assert not heavy, heavy
"""


def test_import_does_not_import_torch():
    proc = _run([sys.executable, "-c", LIGHT])
    assert proc.returncode == 0, proc.stderr


CLI = """
import sys, runpy
sys.argv = ["tfrecord-torch"] + sys.argv[1:]
from tfrecord_torch.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "torchvision") if m in sys.modules)
print("HEAVY", heavy)
"""


@pytest.mark.parametrize("command", ["index", "verify", "inspect", "head", "cat"])
def test_light_cli_commands_do_not_import_torch(tmp_path, command):
    from tfrecord_torch import RecordWriter, make_example

    path = tmp_path / "a.tfrecord"
    with RecordWriter(path) as w:
        for i in range(3):
            w.write(make_example({"id": i, "name": f"n{i}"}))
    args = [command, str(path)]
    if command == "cat":
        args = [command, str(path)]
    proc = _run([sys.executable, "-c", CLI, *args])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HEAVY []" in proc.stdout, proc.stdout


def test_cli_help_is_light():
    proc = _run([sys.executable, "-X", "importtime", "-m", "tfrecord_torch.cli", "--help"])
    assert proc.returncode == 0, proc.stderr
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "torch" not in imported and "numpy" not in imported, sorted(imported)[:50]


def _functions(path: str) -> list[tuple[str, int, int]]:
    """(name, first line, length in lines) of every function in a file, nested ones too."""
    import ast

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _modules(folder: str) -> list[str]:
    top = os.path.join(ROOT, folder)
    return sorted(os.path.join(d, name) for d, _, names in os.walk(top) for name in names if name.endswith(".py"))


def test_no_function_of_the_datasets_is_over_50_lines():
    """data/ (transport included) is split into small steps, each one named: no
    function, method or nested function over 50 lines (STYLE.md)."""
    long = [f"{os.path.relpath(path, ROOT)}:{line} {name} ({length} lines)"
            for path in _modules(os.path.join("tfrecord_torch", "data"))
            for name, line, length in _functions(path) if length > 50]
    assert not long, "functions over 50 lines; split them into named steps: " + ", ".join(long)


def test_the_streaming_dataset_module_stays_a_composition():
    """data/iterable.py holds TFRecordDataset's options and public methods;
    each mode's reading lives in its own module (recordmode, batchmode, streamed)."""
    with open(os.path.join(ROOT, "tfrecord_torch", "data", "iterable.py"), encoding="utf-8") as f:
        lines = len(f.read().splitlines())
    assert lines <= 350, f"data/iterable.py has {lines} lines (at most 350): move a responsibility out of it"


def test_batch_pipeline_takes_option_objects():
    """BatchPipeline is built from a few named values (ShardReads, BatchDecoding,
    the policy), not a flat list of the dataset's settings."""
    import ast

    with open(os.path.join(ROOT, "tfrecord_torch", "data", "batchmode.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BatchPipeline")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    a = init.args
    params = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg != "self"]
    params += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    assert len(params) <= 4, f"BatchPipeline takes {len(params)} arguments {params}; group them in option objects"
