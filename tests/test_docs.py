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
import yaml

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


def _command_sections(page: str) -> dict[str, str]:
    """The CLI page's HTML cut at each command's heading."""
    parts = re.split(r"<h2 id=\"autotune-([a-z-]+)\"", page)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_site_builds_strict_and_documents_every_option_once(site: Path) -> None:
    from autotune.cli import cli

    page = (site / "reference" / "cli" / "index.html").read_text()
    sections = _command_sections(page)
    assert sorted(sections) == sorted(cli.commands)
    for name, command in cli.commands.items():
        first_cells = re.findall(r"<tr>\s*<td>(.*?)</td>", sections[name], flags=re.S)
        named = [re.findall(r"<code>(--[a-z-]+)</code>", cell) for cell in first_cells]
        listed = [opt for cell in named for opt in cell]
        for param in command.params:
            for opt in [*param.opts, *getattr(param, "secondary_opts", [])]:
                if opt.startswith("--"):
                    assert listed.count(opt) == 1, f"{name} {opt}"


def test_the_cli_page_shows_defaults_as_values_and_keeps_placeholders(site: Path) -> None:
    """No sentinel or "None" where a default belongs, and a `<study>` in the help is read
    as text, not swallowed as an HTML tag."""
    page = (site / "reference" / "cli" / "index.html").read_text()
    for leak in ("Sentinel", "UNSET", "<code>None</code>", "<study>", "<model>"):
        assert leak not in page, leak
    run = _command_sections(page)["run"]
    assert "<code>sqlite:///results/&lt;study&gt;/study.db</code>" in page
    assert "&lt;model&gt;-&lt;cluster&gt;-&lt;engine&gt;" in run
    for group in ("The job", "Budget", "Measurement", "The slurm launcher"):
        assert f"<strong>{group}</strong>" in run, group


def test_the_benchmarks_page_claims_each_kept_report_and_links_it(site: Path) -> None:
    page = (site / "reference" / "benchmarks" / "index.html").read_text()
    for folder in ("bench", "benchmarks", "gpu"):
        for report in sorted((ROOT / "results" / folder).glob("*.md")):
            assert f"results/{folder}/{report.name}" in page, report
            shown = site / "reference" / "reports" / f"{folder}-{report.stem}" / "index.html"
            assert shown.is_file(), shown
    assert "goal:" not in page.lower()


def test_every_number_a_claim_states_is_in_its_report() -> None:
    """A claim is a line of its report in other words: a figure it does not state, or a
    report rewritten since with other figures, fails here."""
    claims = yaml.safe_load((ROOT / "results" / "claims.yaml").read_text())
    for report, claim in claims.items():
        text = (ROOT / report).read_text()
        for number in re.findall(r"\d[\d,.]*\d|\d", claim):
            assert number in text, f"{report}: {number} ({claim})"


def test_the_python_api_example_runs_as_printed(tmp_path: Path) -> None:
    """The API page's first example, run as a user would paste it, exports the launch files
    it says it does."""
    page = (ROOT / "docs" / "reference" / "python-api.md").read_text()
    example = re.search(r"```python\n(.*?)```", page, flags=re.S)
    assert example is not None
    ran = subprocess.run(
        [sys.executable, "-c", example.group(1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "'best.yaml'" in ran.stdout and "'train.sh'" in ran.stdout
    assert (tmp_path / "api-results").is_dir()


def test_the_troubleshooting_page_explains_every_outcome_kind(site: Path) -> None:
    """Each kind a trial can end with has its row: what happened, what autotune did, what to
    do; a kind added to the code without one fails here."""
    from autotune.study.record.storage import INTERRUPTED
    from autotune.study.trial_run import AUTOTUNE_ERROR
    from autotune.study.verdict.parity import DIFFERS
    from autotune.trial.spec import OUTCOMES

    page = (site / "troubleshooting" / "index.html").read_text()
    rows = re.findall(r"<tr>\s*<td><code>([a-z_]+)</code></td>", page)
    assert set(rows) >= {*OUTCOMES, DIFFERS, INTERRUPTED, AUTOTUNE_ERROR}
