"""The Example layer and the spec kinds: ``example/`` knows nothing of
``features/``, and no decoder asks a feature which kind it is.

import-linter sees import statements only; these checks read the source."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tfrecord_torch"
ABOVE_EXAMPLE = re.compile(r"tfrecord_torch\.(features|data|tfds|write|cli)\b")


def _trees(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def _strings_naming_layers_above(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports, relative or absolute, and string constants (code and
    docstrings alike) that name a module above ``example/``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level > 1 or (node.module or "").split(".")[0] in ("features", "data", "tfds", "write", "cli"):
                found.append((node.lineno, f"from {'.' * node.level}{node.module or ''} import ..."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            if ABOVE_EXAMPLE.match(node.module):
                found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if ABOVE_EXAMPLE.match(a.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ABOVE_EXAMPLE.search(node.value):
            found.append((node.lineno, ABOVE_EXAMPLE.search(node.value).group(0)))
        elif isinstance(node, ast.Call) and _called(node) in ("import_module", "__import__") and \
                not (node.args and isinstance(node.args[0], ast.Constant)):
            found.append((node.lineno, f"{_called(node)}() of a name built at run time"))
    return found


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def test_example_names_nothing_above_it():
    """``example/`` is the Example wire format: it neither imports the layers
    above it (by statement, by a module name in a string, which import-linter
    cannot see, or by a name built at run time, which no check can) nor
    defines what it reads by pointing up to them in its docs."""
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line} {what}"
             for path, tree in _trees(PACKAGE / "example") for line, what in _strings_naming_layers_above(tree)]
    assert not wrong, wrong


def _spec_kinds() -> set[str]:
    """The names of every Feature subclass in the package (the spec kinds), found by reading the source."""
    bases: dict[str, set[str]] = {}
    for _, tree in _trees(PACKAGE):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
                bases.setdefault(node.name, set()).update(names)
    kinds = {"Feature"}
    while True:
        more = {name for name, of in bases.items() if of & kinds} - kinds
        if not more:
            return kinds
        kinds |= more


def _named(node: ast.AST) -> list[str]:
    """The class names in the second argument of isinstance/issubclass, or right of ``type(x) is/in``."""
    if isinstance(node, ast.Tuple):
        return [n for elt in node.elts for n in _named(elt)]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return [node.id] if isinstance(node, ast.Name) else []


def _own_nodes(function: ast.AST):
    """The nodes of a function's own body (nested functions and classes not included)."""
    todo = list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(node))
        yield node


def _type_checks(function: ast.AST) -> set[str]:
    """The classes a function's own body asks an object about (nested functions not included)."""
    names: set[str] = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass") \
                and len(node.args) == 2:
            names.update(_named(node.args[1]))
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) \
                and getattr(node.left.func, "id", None) == "type":
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn, ast.Eq, ast.NotEq)):
                    names.update(_named(right))
    return names


def test_no_decoder_dispatches_on_the_spec_kind():
    """A function that asks a feature which of two or more kinds it is (an
    ``isinstance`` chain) is a decoder that must learn every new kind; the
    kinds answer for themselves instead (``Feature.decode``,
    ``decode_column``, ``decode_steps``, ``check_sequence``, ``read_plan``).
    One type check (``isinstance(f, Image)``) is no chain."""
    kinds = _spec_kinds()
    assert {"Int64", "Float", "Bytes", "Image", "Boxes", "StepRows"} <= kinds, sorted(kinds)
    wrong = []
    for path, tree in _trees(PACKAGE):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                asked = _type_checks(node) & kinds
                if len(asked) >= 2:
                    wrong.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} asks "
                                 f"{sorted(asked)}")
    assert not wrong, wrong


RECORD_KINDS = {"Payload", "SequenceSpec"}  # what features= may be besides a dict (or None)
SPEC_NAMED = re.compile(r"(^|\.)[a-z_]*spec$")  # spec, self.spec, planned.spec, ...


def _record_kinds() -> set[str]:
    """The record-spec kinds: the user's (a dict, a SequenceSpec, a Payload,
    None) and every RecordSpec subclass in data/, found by reading the source."""
    kinds = set(RECORD_KINDS)
    for _, tree in _trees(PACKAGE / "data"):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and "RecordSpec" in {getattr(b, "id", "") for b in node.bases}:
                kinds.add(node.name)
    return kinds


def _spec_kind_checks(function: ast.AST, kinds: set[str]) -> list[str]:
    """The questions a function's own body asks a spec about its kind:
    a type check naming a record kind, ``isinstance(<spec>, dict)``, and
    ``<spec> is None`` (no features=: Examples parsed, not decoded)."""
    asked = sorted(_type_checks(function) & kinds)
    for node in _own_nodes(function):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2 \
                and SPEC_NAMED.search(ast.unparse(node.args[0])) and "dict" in _named(node.args[1]):
            asked.append(f"isinstance({ast.unparse(node.args[0])}, dict)")
        elif isinstance(node, ast.Compare) and SPEC_NAMED.search(ast.unparse(node.left)) and any(
                isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None
                for op, right in zip(node.ops, node.comparators)):
            asked.append(ast.unparse(node))
    return asked


def test_no_reader_dispatches_on_the_record_kind():
    """What ``features=`` says a record is (a dict: a tf.train.Example; a
    SequenceSpec: a SequenceExample; a Payload: bytes as they are; None:
    parsed, not decoded) is asked once, by ``record_spec`` in
    ``data/recordspec.py``; every other module of ``data/`` calls the
    kind's methods (``decode``, ``begin_batch``, ``read_compiled``,
    ``shown``, ...), so a new kind of record is one class, not a branch in
    each reader. Even one such question outside ``record_spec`` fails:
    with a dict and None beside it, it is a chain."""
    kinds = _record_kinds()
    assert {"ExampleRecords", "SequenceRecords", "PayloadRecords", "ParsedRecords"} <= kinds, sorted(kinds)
    wrong = []
    for path, tree in _trees(PACKAGE / "data"):
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    (str(where), node.name) != ("tfrecord_torch/data/recordspec.py", "record_spec"):
                asked = _spec_kind_checks(node, kinds)
                if asked:
                    wrong.append(f"{where}:{node.lineno} {node.name} asks {asked}")
    assert not wrong, wrong


def test_the_record_kind_check_sees_a_dispatch():
    """The check above finds each way a reader asked the record kind before
    the kinds answered for themselves."""
    source = '''
def decode_payload(payload, spec):
    if isinstance(spec, Payload):
        return payload
    if spec is None:
        return parse(payload)
    return decode(payload, spec)

def plan(self):
    return isinstance(self.spec, dict) and reads_once(self.spec)
'''
    found = [c for node in ast.parse(source).body for c in _spec_kind_checks(node, RECORD_KINDS)]
    assert found == ["Payload", "spec is None", "isinstance(self.spec, dict)"], found
