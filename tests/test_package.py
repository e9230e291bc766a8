"""The package's shape: its modules import each other without cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import REPO

PACKAGE = REPO / "autotune"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(nodes: list[ast.AST], modules: set[str]) -> set[str]:
    """The autotune modules these import statements name (`from package import module`
    counts as the module, as `import package.module` does); other nodes are skipped."""
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [m if m in modules else node.module for m in submodules]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def imports_at_load(path: Path, modules: set[str]) -> set[str]:
    """autotune modules a module imports when it is loaded: its top-level imports, not
    those inside functions or under `if TYPE_CHECKING`."""
    body: list[ast.AST] = list(ast.parse(path.read_text()).body)
    return imported(body, modules) - {module_name(path)}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports_at_load(path, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return groups


def test_modules_import_each_other_without_cycles() -> None:
    graph = import_graph()
    assert "autotune.engines.command" in graph["autotune.problem"]  # the graph sees imports
    assert cycles(graph) == []


def test_a_cycle_would_be_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def every_import(path: Path, modules: set[str]) -> set[str]:
    """autotune modules a module imports anywhere (in functions too), but under
    `if TYPE_CHECKING`."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    return imported([n for n in ast.walk(tree) if id(n) not in typing_only], modules)


def parts_graph(package: str) -> dict[str, set[str]]:
    """The modules under `package` grouped by the part each belongs to (its subpackage there,
    or the module itself: `autotune.study.loop` is `study` in `autotune`, `loop` in
    `autotune.study`), with the imports between parts; the package's own __init__ left out."""
    everything = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    inside = {m: p for m, p in everything.items() if m.startswith(f"{package}.")}
    depth = package.count(".") + 1

    def part(module: str) -> str:
        return module.split(".")[depth]

    graph: dict[str, set[str]] = {part(m): set() for m in inside}
    for module, path in inside.items():
        for target in every_import(path, set(everything)):
            if target in inside and part(target) != part(module):
                graph[part(module)].add(part(target))
    return graph


def subpackage_graph() -> dict[str, set[str]]:
    return parts_graph("autotune")


def test_subpackages_import_each_other_without_cycles() -> None:
    """Counting imports inside functions too: study/ never imports report/, trial/ neither
    engines/ nor launchers/, and so on for every pair."""
    graph = subpackage_graph()
    assert "engines" in graph["problem"] and "study" in graph["report"]  # it sees imports
    assert cycles(graph) == []


@pytest.mark.parametrize(
    ("part", "never"),
    [
        ("estimate", {"engines", "problem", "launchers", "study"}),
        ("trial", {"engines", "launchers"}),
        ("launchers", {"engines"}),
        ("rank", {"engines", "study", "launchers"}),
        ("study", {"report"}),
        ("export", {"report"}),  # the winner is the study's verdict (`study.verdict`)
    ],
)
def test_parts_import_only_what_the_design_lets_them(part: str, never: set[str]) -> None:
    assert subpackage_graph()[part] & never == set()


def test_the_studys_rooms_import_each_other_without_cycles() -> None:
    """The stored record imports no other room; the verdict only the record; the search may
    read the verdict and slices, never the loop that runs it."""
    graph = parts_graph("autotune.study")  # its rooms and the loop's own modules
    assert {"record", "verdict", "search", "slice", "loop"} <= set(graph)
    assert "record" in graph["verdict"] and "verdict" in graph["search"]  # it sees imports
    assert cycles(graph) == []
    assert graph["record"] == set()
    assert graph["verdict"] == {"record"}
    assert graph["search"] <= {"record", "verdict", "slice", "choices"}


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_modules_and_functions_stay_short() -> None:
    """No module over 400 lines and no function over 60, so each has one job a reader can
    hold in mind."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long.append(f"{path}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path}:{node.lineno} {node.name}: {length} lines")
    assert long == []
