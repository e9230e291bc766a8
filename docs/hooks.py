"""MkDocs hook: the Benchmarks page lists every report a bench keeps in results/bench/.

`reference/benchmarks.md` holds the marker below; at build time it becomes one section per
`results/bench/*.md`, the report's own text with its headings moved down a level, so the page
always shows what the benches last wrote."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MARKER = "<!-- bench-reports -->"
BENCH = Path(__file__).resolve().parent.parent / "results" / "bench"


def report_section(report: Path) -> str:
    """One report as a section: `## file` then its text, headings two levels down."""
    text = report.read_text()
    title, _, body = text.partition("\n")
    title = title.lstrip("#").strip() or report.stem
    body = re.sub(r"^(#{1,4}) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", body, flags=re.M)
    return f"## {title}\n\n`results/bench/{report.name}`\n{body}\n"


def bench_reports(bench: Path = BENCH) -> str:
    reports = sorted(bench.glob("*.md"))
    if not reports:
        raise FileNotFoundError(f"no reports in {bench}")
    return "\n".join(report_section(report) for report in reports)


def on_page_markdown(markdown: str, page: Any, **_kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, bench_reports())
