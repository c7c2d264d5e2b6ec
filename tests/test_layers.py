"""The package's layers are a rule, not prose: which layer may import which.

``review`` reads perflogs and never the run side, the check library or ReFrame; only
``testlib`` imports ReFrame; ``cli`` may import anything. docs/architecture.md draws the same.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fabreg"

#: The modules allowed at the top of the package: the vocabulary every layer shares.
#: (isolation.py: the suspects of a sweep, named alike by the sweep check and by review.)
TOP_LEVEL = {"__init__.py", "errors.py", "metrics.py", "schema.py", "isolation.py"}
LAYERS = {"run", "testlib", "review", "cluster", "cli"}

#: layer -> the imports it must not make (prefixes of dotted module names).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "shared": ("fabreg.run", "fabreg.testlib", "fabreg.review", "fabreg.cluster", "fabreg.cli",
               "reframe"),
    "run": ("fabreg.testlib", "fabreg.review", "fabreg.cluster", "fabreg.cli", "reframe"),
    "review": ("fabreg.run", "fabreg.testlib", "fabreg.cluster", "fabreg.cli", "reframe"),
    "cluster": ("fabreg.testlib", "fabreg.review", "fabreg.cli", "reframe"),
    "testlib": ("fabreg.review", "fabreg.cluster", "fabreg.cli"),
    "cli": (),
}


def imported_modules(source: str, module: str) -> set[str]:
    """Every module ``source`` imports, at any depth (function-level imports too)."""
    found: set[str] = set()
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def layer_of(rel: Path) -> str:
    """The layer of a module by its path inside the package."""
    return rel.parts[0] if len(rel.parts) > 1 else "shared"


def violations(package: Path = PACKAGE) -> list[str]:
    """``file: imports X`` for every import that crosses a layer the wrong way."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        module = "fabreg." + ".".join(rel.with_suffix("").parts)
        for imported in sorted(imported_modules(path.read_text(), module)):
            for banned in FORBIDDEN[layer_of(rel)]:
                if imported == banned or imported.startswith(banned + "."):
                    found.append(f"{rel}: imports {imported}")
    return found


def test_no_layer_imports_against_the_data_flow():
    assert violations() == []


def test_only_the_shared_vocabulary_stays_at_the_top():
    top = {p.name for p in PACKAGE.glob("*.py")}
    dirs = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert top == TOP_LEVEL
    assert dirs == LAYERS


@pytest.mark.parametrize("layer, source, culprit", [
    ("review", "from fabreg.run.transport import verify", "fabreg.run.transport"),
    ("review", "import reframe.utility.sanity as sn", "reframe.utility.sanity"),
    ("run", "def f():\n    from fabreg.testlib import mpi", "fabreg.testlib"),
    ("cluster", "from ..review import store", "fabreg.review"),
    ("metrics.py", "import reframe", "reframe"),
])
def test_a_crossing_import_is_found(tmp_path, layer, source, culprit):
    path = tmp_path / layer if layer.endswith(".py") else tmp_path / layer / "bad.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source + "\n")
    rel = path.relative_to(tmp_path).as_posix()
    assert f"{rel}: imports {culprit}" in violations(tmp_path)


def test_allowed_imports_are_not_flagged(tmp_path):
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "ok.py").write_text("import reframe\nfrom fabreg.run import stress\n")
    (tmp_path / "testlib").mkdir()
    (tmp_path / "testlib" / "ok.py").write_text("import reframe\nfrom fabreg.run import gpu\n")
    assert violations(tmp_path) == []


def test_architecture_doc_names_every_module():
    """docs/architecture.md is the map of the tree: a module it does not name is a stale map."""
    doc = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text()
    tree = doc[doc.index("```"):doc.index("## Data flow")]
    unnamed = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name not in ("__init__.py", "__main__.py")
               and not re.search(rf"\b{re.escape(p.stem)}\b", tree)]
    assert unnamed == [], f"docs/architecture.md does not name: {', '.join(unnamed)}"


def undocumented_variables(package: Path = PACKAGE) -> list[str]:
    """testlib variables, parameters and fixtures without a ``#:`` comment that says what
    they are, their ``:type:`` and their ``:default:`` (as ReFrame's hpctestlib does)."""
    found = []
    for path in sorted((package / "testlib").glob("*.py")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            m = re.match(r"\s+(\w+) = (variable|parameter|fixture)\(", line)
            if not m:
                continue
            block = []
            k = number - 1
            while k >= 0 and lines[k].strip().startswith("#:"):
                block.insert(0, lines[k].strip()[2:].strip())
                k -= 1
            text = [b for b in block if b and not b.startswith(":")]
            if not (text and any(b.startswith(":type:") for b in block)
                    and any(b.startswith(":default:") for b in block)):
                found.append(f"{path.name}:{number + 1}: {m.group(1)}")
    return found


def test_testlib_variables_say_what_they_are_with_type_and_default():
    assert undocumented_variables() == []


def test_an_undocumented_variable_is_found(tmp_path):
    (tmp_path / "testlib").mkdir()
    (tmp_path / "testlib" / "x.py").write_text(
        "class C:\n    #: Documented.\n    #:\n    #: :type: ``int``\n    #: :default: ``1``\n"
        "    a = variable(int, value=1)\n    #: No type or default.\n    b = variable(int)\n"
        "    c = parameter([1])\n")
    assert undocumented_variables(tmp_path) == ["x.py:8: b", "x.py:9: c"]
