"""Every name the benchmarks and scripts import from autotune exists: a refactor of the package
breaks a benchmark here, in the fast tier, rather than at its next measurement."""

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


def test_every_script_imports_names_the_package_has() -> None:
    scripts = sorted((REPO / "scripts").rglob("*.py"))
    assert len(scripts) > 20
    assert [m for path in scripts for m in missing_imports(path)] == []


def test_a_name_the_package_lost_is_found(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text("from autotune.study.loop import MIN_REPEATS\n")
    assert missing_imports(script) == ["bench.py: autotune.study.loop.MIN_REPEATS"]
