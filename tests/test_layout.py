"""The package's shape: imports point down the pipeline only, and no module imports itself back in a circle.

The graph is built from the sources (every `import` statement, lazy imports inside functions included; those
under `if TYPE_CHECKING:` are annotations, never run, and left out). The stages, bottom to top:

    foundation (fp8advisor.errors, .paths, .files, .device, .compat, .recipes, .request, ._lazy)
    -> inspect -> frameworks -> measure -> predict -> advice -> emit -> verification -> cli

A module may import from its own stage and the stages below it, never above; `fp8advisor` itself (the public
API, which loads its names lazily) and the deprecated shims of the old flat layout sit on top. Importing an
ancestor package (`from fp8advisor import compat`) is not an edge to its `__init__`: Python runs a package's
`__init__` before any of its modules anyway.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fp8advisor"

STAGES = (
    "foundation",
    "inspect",
    "frameworks",
    "measure",
    "traces",
    "predict",
    "advice",
    "emit",
    "verification",
    "cli",
)
TOP = len(STAGES)
#: The old flat modules kept for one release: they import their new home, above every stage.
DEPRECATED_SHIMS = frozenset({"fp8advisor.target", "fp8advisor.layers"})


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(name: str) -> int:
    if name in ("fp8advisor", "fp8advisor.__main__") or name in DEPRECATED_SHIMS:
        return TOP
    parts = name.split(".")
    if len(parts) > 2 or (len(parts) == 2 and parts[1] in STAGES):
        return STAGES.index(parts[1])
    return STAGES.index("foundation")


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement except those under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in _runtime_imports(child))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _runtime_imports(node)


def exported_from(tree: ast.AST) -> dict[str, str]:
    """A package's lazy re-exports (`_EXPORTS = {name: module}`, `fp8advisor._lazy`): imports on first use."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the fp8advisor modules it imports (at run time, lazily or not)."""
    paths = {module_name(path, package): path for path in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        depth = name.count(".") + (2 if is_package else 1)
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, depth)}
        targets: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        targets.update(module for module in exported_from(tree).values() if module in paths)
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
                found = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            targets.update(t for t in found if t in paths and t != name and t not in ancestors)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == 1:
                return path[path.index(successor) :] + [successor]
            if successor not in state and (cycle := visit(successor, path)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node, [])):
            return cycle
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} ({STAGES[stage_of(module)]}) imports {target} ({STAGES[stage_of(target)]})"
        for module, targets in graph.items()
        for target in targets
        if stage_of(module) < TOP and stage_of(target) > stage_of(module)
    )


def test_no_import_cycles():
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()))


def test_imports_point_down_the_pipeline():
    assert upward_imports(import_graph()) == []


PUBLIC_PACKAGES = [
    "fp8advisor",
    *(f"fp8advisor.{stage}" for stage in STAGES if stage not in ("foundation", "cli")),
]


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_each_exported_name_resolves_and_says_what_it_is(package):
    """`import fp8advisor` gives the pipeline's functions and records, each with a docstring; a stage package
    gives its own. No export shares its name with a module of the package (`from pkg import name` would then
    give the module once it has been imported)."""
    import importlib

    module = importlib.import_module(package)
    assert module.__doc__ and len(module.__doc__) > 200, f"{package} needs a docstring: what comes in and out"
    submodules = {path.stem for path in Path(module.__file__).parent.iterdir()}
    for name in module.__all__:
        if name == "__version__":
            continue
        value = getattr(module, name)
        assert value.__doc__, f"{package}.{name} has no docstring"
        assert name not in submodules, f"{package}.{name} is both an export and a module"


def test_public_api_stays_light():
    """`import fp8advisor` imports none of the pipeline: the names load on first use."""
    import subprocess
    import sys

    code = "import sys, fp8advisor; print(sorted(m for m in sys.modules if m.startswith(('fp8advisor.', 'torch'))))"  # noqa: E501
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['fp8advisor._lazy']"


#: "About 600": census.py (the op census's records and the tracer that fills them, one concept under one
#: docstring of rules) is 608.
MAX_MODULE_LINES = 620
MAX_FUNCTION_LINES = 80


def oversized(package: Path = PACKAGE) -> list[str]:
    """Modules over MAX_MODULE_LINES lines, and functions whose body (from its first line: a command's option
    declarations are its signature) is over MAX_FUNCTION_LINES."""
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(package.parent)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.body[0].lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{where}:{node.lineno} {node.name}(): {length} lines")
    return found


def test_no_module_or_function_is_oversized():
    assert oversized() == []


def test_the_size_check_counts_what_it_names(tmp_path):
    package = tmp_path / "fp8advisor"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES + 1))
    (package / "long.py").write_text(f"def f(\n    a,\n    b,\n):\n{body}\n")
    (package / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (package / "fine.py").write_text("def g(\n" + "    a,\n" * 200 + "):\n    return a\n")
    assert oversized(package) == [
        f"fp8advisor/big.py: {MAX_MODULE_LINES + 1} lines",
        "fp8advisor/long.py:1 f(): 81 lines",
    ]


def test_every_module_belongs_to_a_known_stage():
    for name in import_graph():
        assert 0 <= stage_of(name) <= TOP


@pytest.mark.parametrize(
    "files, broken",
    [
        # a lazy import inside a function closes a circle as surely as one at the top
        ({"a.py": "import fp8advisor.b\n", "b.py": "def f():\n    from fp8advisor import a\n"}, "cycle"),
        ({"errors.py": "def f():\n    from fp8advisor.cli import app\n", "cli/__init__.py": ""}, "upward"),
        (
            {
                "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fp8advisor.b\n",
                "b.py": "import fp8advisor.a\n",
            },
            None,
        ),  # fmt: skip
    ],
)
def test_the_checks_catch_what_they_name(tmp_path, files, broken):
    package = tmp_path / "fp8advisor"
    for relative, text in {"__init__.py": "", **files}.items():
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(text)
    graph = import_graph(package)
    assert (find_cycle(graph) is not None) == (broken == "cycle")
    assert bool(upward_imports(graph)) == (broken == "upward")


@pytest.mark.parametrize(
    "old, names",
    [
        (
            "fp8advisor.target",
            ["load_model", "parse_target", "TargetSpec", "redirect_devices", "make_example_inputs"],
        ),
        ("fp8advisor.layers", ["inspect_model", "ModelLayers", "GemmLayer", "fold_repeated", "_storage_key"]),
    ],
)
def test_old_import_paths_still_work_for_one_release_and_say_so(old, names):
    """README: `fp8advisor.target` and `fp8advisor.layers` moved to `fp8advisor.inspect`; for one release they
    still import, with a DeprecationWarning naming the new home."""
    import importlib
    import sys
    import warnings

    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert any(
        issubclass(w.category, DeprecationWarning) and "fp8advisor.inspect" in str(w.message) for w in caught
    )
    for name in names:
        assert getattr(module, name) is not None, name
    star: dict = {}
    exec(f"from {old} import *", star)  # the old module's public names, as they were
    assert {name for name in names if not name.startswith("_")} <= set(star)
