"""Rewrite README.md's headline table from the benchmarks' kept reports in results/bench/.

The table lies between the two marker comments below; tests/test_docs.py checks that the README
holds what this script makes from results/, so the table cannot go stale. Run it after a bench
rewrites its report:

    python scripts/readme_headline.py            # rewrite README.md
    python scripts/readme_headline.py --check    # exit 1 if README.md is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.units import display_label

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- headline:begin (scripts/readme_headline.py writes this table) -->"
END = "<!-- headline:end -->"
VS_DEEPSPEED = "vs_deepspeed_autotuner.md"
DEFAULT_RUN = "default_run.md"


def _table(lines: list[str]) -> list[dict[str, str]]:
    """The rows of the first markdown table in `lines`, keyed by its header."""
    table: list[list[str]] = []
    for line in lines:
        if line.startswith("|"):
            table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif table:
            break
    if len(table) < 3:
        raise ValueError("no table with a row")
    return [dict(zip(table[0], row, strict=True)) for row in table[2:]]


def markdown_table(text: str, section: str | None = None) -> list[dict[str, str]]:
    """The rows of the first table after the heading `## {section}` (or in the whole text)."""
    lines = text.splitlines()
    if section is not None:
        heading = f"## {section}"
        if heading not in lines:
            raise ValueError(f"no section {heading!r}")
        lines = lines[lines.index(heading) + 1 :]
    return _table(lines)


ROWS = {
    "DeepSpeed autotuner (fast)": "`deepspeed --autotuning tune` on the script as shipped: it "
    "keeps the ZeRO stage of the script's ds_config.json and tunes the micro-batch; its pick "
    "is the 1.00x every speed is measured against.",
    "autotune run": "the README's own command, `autotune run -- ds_train.py ...` with its "
    "defaults, from the same ds_config.json: the script's config first, then the guided "
    "search, then repeats of the leaders.",
    "autotune run, copied config": "the same, but the script's ds_config.json replaced by one "
    "copied from a large model's job (ZeRO 3, micro-batch 16), so that measuring the user's "
    "config first cannot be the whole story.",
    "autotune run --no-confirm": "no repeats of the leaders: its pick rests on one launch of "
    "each config, as DeepSpeed's does.",
}
"""What each row of the headline table means, by the tuner's name in the report."""


def picks(text: str) -> str:
    """A report's pick cell with each config as users write it (`a (1 of 2); b (1 of 2)`)."""
    parts = []
    for part in text.split("; "):
        config, paren, count = part.partition(" (")
        parts.append(display_label(config) + (f" ({count}" if paren else ""))
    return "; ".join(parts)


def headline(bench: Path) -> str:
    """The README's headline: autotune beside DeepSpeed's autotuner, what each row means, and
    the first command."""
    tuners = markdown_table((bench / VS_DEEPSPEED).read_text(), "The tuners")
    lines = [
        "| tuner, on one unmodified DeepSpeed script | wall time | experiments | pick "
        "| pick's speed vs DeepSpeed's pick |",
        "|---|---|---|---|---|",
    ]
    speed = "pick's speed vs DeepSpeed's (per round)"
    for row in tuners:
        lines.append(
            f"| {row['tuner']} | {row['wall time']} | {row['experiments']} "
            f"| {picks(row['pick'])} | {row[speed]} |"
        )
    lines += ["", *(f"- **{row['tuner']}**: {ROWS[row['tuner']]}" for row in tuners)]
    runs = markdown_table((bench / DEFAULT_RUN).read_text())
    now = runs[-1]
    lines += [
        "",
        f"The first command above (`tiny`, 2 gloo processes): {now['wall time'].split(' (')[0]}, "
        f"{now['trials']} trials, winner {picks(now['winner (runs)'])}.",
        "",
        f"From [`results/bench/{VS_DEEPSPEED}`](results/bench/{VS_DEEPSPEED}) and "
        f"[`results/bench/{DEFAULT_RUN}`](results/bench/{DEFAULT_RUN}), made at one revision "
        "on a shared 2-core machine: each figure is the least-most over repeated runs of each "
        "tuner; speeds are ratios of median step times re-measured side by side, interleaved, "
        "above 1 faster than DeepSpeed's pick, with the least-most per round in brackets. A "
        "speed below 1 is a pick the study's short trials read as fast as the configs it "
        "beat, DeepSpeed's among them where it ran, on a machine whose launches of one config "
        "differ by up to about 20%: the report lists every trial.",
    ]
    return "\n".join(lines)


def rewritten(readme: str, table: str) -> str:
    """`readme` with the text between the markers replaced by `table`."""
    before, sep, rest = readme.partition(BEGIN)
    if not sep or END not in rest:
        raise ValueError(f"README.md lacks the markers {BEGIN!r} and {END!r}")
    _, _, after = rest.partition(END)
    return f"{before}{BEGIN}\n{table}\n{END}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is stale")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--bench", type=Path, default=ROOT / "results" / "bench")
    args = parser.parse_args(argv)
    old = args.readme.read_text()
    new = rewritten(old, headline(args.bench))
    if args.check:
        if new != old:
            print(f"{args.readme} is stale: run scripts/readme_headline.py", file=sys.stderr)
            return 1
        return 0
    if new != old:
        args.readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
