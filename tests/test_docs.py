"""The README and the documentation site: the README's headline table is what
scripts/readme_headline.py makes from results/bench/, its test command is CI's, and the site
builds with warnings as errors, every CLI command in its reference page."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.paths import REPO as ROOT


def _headline_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "readme_headline", ROOT / "scripts" / "readme_headline.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_headline_is_what_the_script_makes_from_results() -> None:
    script = _headline_script()
    readme = (ROOT / "README.md").read_text()
    table = script.headline(ROOT / "results" / "bench")
    assert script.rewritten(readme, table) == readme, "run scripts/readme_headline.py"


def test_the_readme_runs_what_ci_runs_and_stays_short() -> None:
    readme = (ROOT / "README.md").read_text()
    ci_command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert readme.splitlines()[4].startswith(ci_command + " ")
    assert readme.splitlines()[3].startswith("./scripts/setup.sh && .venv/bin/autotune run ")
    assert len(readme.splitlines()) <= 200


def test_the_readme_links_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)\)", readme)
    assert targets
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing


def _mkdocs() -> list[str]:
    beside = Path(sys.executable).parent / "mkdocs"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("mkdocs")
    if found is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[dev]'")
    return [found]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [*_mkdocs(), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def test_the_site_builds_strict_and_documents_every_command(site: Path) -> None:
    from autotune.cli import cli

    page = (site / "reference" / "cli" / "index.html").read_text()
    for name, command in cli.commands.items():
        assert f"autotune {name}" in page, name
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("--"):
                    assert opt in page, f"{name} {opt}"


def test_the_benchmarks_page_lists_every_kept_report(site: Path) -> None:
    page = (site / "reference" / "benchmarks" / "index.html").read_text()
    for report in sorted((ROOT / "results" / "bench").glob("*.md")):
        assert report.name in page, report.name
