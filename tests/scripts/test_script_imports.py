"""Every name the benchmarks and scripts import from autotune exists, and the benchmarks import
only public ones: a refactor of the package breaks a benchmark here, in the fast tier, rather
than at its next measurement."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from tests.paths import REPO


def missing_imports(path: Path) -> list[str]:
    """`module.name` for each autotune import in `path` that does not resolve."""
    missing = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
            continue
        if not node.module.startswith("autotune"):
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            if hasattr(module, alias.name):
                continue
            try:
                importlib.import_module(f"{node.module}.{alias.name}")
            except ModuleNotFoundError:
                missing.append(f"{path.name}: {node.module}.{alias.name}")
    return missing


def private_imports(path: Path) -> list[str]:
    """`module.name` for each import in `path` of a private autotune name or module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        parts = (n for n in names if n.startswith(("autotune.", "benchmarks.")))
        found += [n for n in parts if any(p.startswith("_") for p in n.split("."))]
    return [f"{path.name}: {name}" for name in found]


def test_every_script_and_benchmark_imports_names_the_package_has() -> None:
    scripts = sorted((REPO / "scripts").rglob("*.py")) + sorted((REPO / "benchmarks").glob("*.py"))
    assert len(scripts) > 30
    assert [m for path in scripts for m in missing_imports(path)] == []


def test_the_benchmarks_use_public_names_only() -> None:
    found = [m for path in (REPO / "benchmarks").glob("*.py") for m in private_imports(path)]
    assert found == []


def test_a_name_the_package_lost_and_a_private_one_are_found(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text(
        "from autotune.study.loop import MIN_REPEATS\n"
        "from autotune.study.search._model_errors import Beliefs\n"
        "from autotune.estimate.collectives import _offered\n"
    )
    assert missing_imports(script) == ["bench.py: autotune.study.loop.MIN_REPEATS"]
    assert private_imports(script) == [
        "bench.py: autotune.study.search._model_errors.Beliefs",
        "bench.py: autotune.estimate.collectives._offered",
    ]
