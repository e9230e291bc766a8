"""MkDocs hooks: the Benchmarks page is a table of claims, one per kept report (its figure, its
date and revision, its command, a link to the report as a page of its own); the CLI page lists
every command and option as `--help` groups them; sample output comes from the tests' golden
files, so no page drifts from what the code prints or the benches last wrote."""

from __future__ import annotations

import html
import inspect
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- bench-claims -->"
REPORT_FOLDERS = ("results/bench", "results/benchmarks", "results/gpu")
CLAIMS = ROOT / "results" / "claims.yaml"
"""One sentence per report: its headline figures, each of which the report states
(tests/test_docs.py checks every number)."""
_MADE = re.compile(r"(?:Generated|report of) (\d{4}-\d\d-\d\d)[T ]?[\d:]*\s*(?:by )?`?([^`]*)`?")
_COMMAND = re.compile(r"`((?:\.venv/bin/)?(?:python |nice )[^`]*|scripts/[^`]*)`")


def reports() -> list[Path]:
    """Every report the benches keep, as paths relative to the repository."""
    found = [p for folder in REPORT_FOLDERS for p in sorted((ROOT / folder).glob("*.md"))]
    if not found:
        raise FileNotFoundError(f"no reports in {', '.join(REPORT_FOLDERS)}")
    return [p.relative_to(ROOT) for p in found]


def report_page(report: Path) -> str:
    """Where a report is shown as a page of its own."""
    return f"reference/reports/{report.parent.name}-{report.stem}.md"


def _revision(report: Path) -> str:
    """The commit that last wrote the report."""
    ran = subprocess.run(
        ["git", "log", "-1", "--format=%h %cs", "--", str(report)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return ran.stdout.strip() or "not committed"


def claim_row(report: Path, claims: dict[str, str]) -> str:
    text = (ROOT / report).read_text()
    title = text.partition("\n")[0].lstrip("#").strip() or report.stem
    made = _MADE.search(text)
    command = _COMMAND.search(text)
    claim = claims.get(report.as_posix(), title)
    link = f"[{report.as_posix()}]({report_page(report).removeprefix('reference/')})"
    command_cell = f"`{command.group(1)}`" if command else ""
    revision, _, committed = _revision(report).partition(" ")
    date = made.group(1) if made else committed
    cells = [_cell(claim), f"{date}, {revision}", command_cell, link]
    return "| " + " | ".join(cells) + " |"


def bench_claims() -> str:
    claims = yaml.safe_load(CLAIMS.read_text()) or {}
    head = ["| claim | made, revision | command | report |", "|---|---|---|---|"]
    return "\n".join([*head, *(claim_row(r, claims) for r in reports())])


def on_files(files: Any, config: Any, **_kwargs: Any) -> Any:
    """Each report as a page under reference/reports/, its text as the bench wrote it."""
    from mkdocs.structure.files import File

    for report in reports():
        content = (ROOT / report).read_text()
        files.append(File.generated(config, report_page(report), content=content))
    return files


CLI_MARKER = "<!-- cli-reference -->"
_CODE = re.compile(r"(`[^`]*`)")


def _escaped(text: str) -> str:
    """Markdown text with `<placeholders>` kept visible: HTML-escaped outside code spans."""
    parts = _CODE.split(text)
    return "".join(p if p.startswith("`") else html.escape(p, quote=False) for p in parts)


def _cell(text: str) -> str:
    return _escaped(" ".join(text.split())).replace("|", "\\|")


def _option_row(param: Any, ctx: Any) -> str:
    from autotune.cli.help import default_text, help_without_default

    names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    kind = "" if param.is_flag else param.make_metavar(ctx)
    default = default_text(param, ctx)
    # a value in code; a description of one ("the engine's") as text
    default_cell = _cell(default) if " " in default else f"`{default}`" if default else ""
    kind_cell = _cell(kind.lower())
    return f"| {names} | {kind_cell} | {default_cell} | {_cell(help_without_default(param))} |"


def command_section(name: str, command: Any, parent: Any) -> str:
    """One command: its help, its usage line and its options, grouped as `--help` groups
    them, each default as the user would type it."""
    import click

    from autotune.cli.help import GroupedCommand

    ctx = click.Context(command, info_name=name, parent=parent)
    if isinstance(command, GroupedCommand):
        groups = command.option_groups(ctx)
    else:
        groups = [("Options", [p for p in command.get_params(ctx) if isinstance(p, click.Option)])]
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"## autotune {name}", "", _escaped(inspect.cleandoc(command.help or "")), ""]
    lines += ["```text", f"autotune {name} {usage}", "```", ""]
    for title, members in groups:
        lines += [f"**{title}**", "", "| Option | Type | Default | What it does |"]
        lines += ["|---|---|---|---|", *(_option_row(p, ctx) for p in members), ""]
    return "\n".join(lines)


def cli_reference() -> str:
    import click

    from autotune.cli import cli

    root = click.Context(cli, info_name="autotune")
    return "\n".join(command_section(n, cli.commands[n], root) for n in sorted(cli.commands))


GOLDEN = ROOT / "tests" / "golden"
_GOLDEN_MARKER = re.compile(r"<!-- golden: ([\w./-]+) -->")


def golden_samples(markdown: str) -> str:
    """`<!-- golden: NAME -->` as a text block of tests/golden/NAME: sample output that the
    tests hold to what the code prints, so the page cannot drift from it."""
    return _GOLDEN_MARKER.sub(
        lambda m: f"```text\n{(GOLDEN / m.group(1)).read_text().rstrip()}\n```", markdown
    )


def on_page_markdown(markdown: str, page: Any, **_kwargs: Any) -> str:
    markdown = golden_samples(markdown)
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, bench_claims())
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return markdown
