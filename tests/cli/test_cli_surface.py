"""The CLI's commands and options, frozen: scripts and CI jobs call them, so a change to a
name, a default or an argument must change tests/golden/cli.txt too (AUTOTUNE_UPDATE_GOLDEN=1
rewrites it; then say the change in README)."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli import cli
from tests.engines.megatron.test_megatron import check_golden
from tests.export.test_export_goldens import GOLDEN


def describe(param: click.Parameter) -> str:
    """One line per parameter: its spellings, kind, type, default and arity."""
    words = ["  ", " / ".join([*param.opts, *param.secondary_opts]) or param.name or "?"]
    kind = "argument" if isinstance(param, click.Argument) else "option"
    kind_of_value = param.type.name
    if isinstance(param.type, click.Choice):
        kind_of_value = "choice " + "|".join(str(c) for c in param.type.choices)
    words.append(f"[{kind} {kind_of_value}")
    if isinstance(param, click.Option) and param.is_flag:
        words.append("flag")
    if param.multiple or param.nargs == -1:
        words.append("many")
    if param.required:
        words.append("required")
    default = param.default
    if default is not None and not callable(default) and "Sentinel" not in repr(default):
        words.append(f"default={str(default) if isinstance(default, Path) else repr(default)}")
    return " ".join(words) + "]"


def surface() -> str:
    lines = []
    for name in sorted(cli.commands):
        command = cli.commands[name]
        lines.append(name)
        lines += sorted(describe(p) for p in command.params if p.name != "help")
    return "\n".join(lines) + "\n"


def test_the_cli_surface_matches_its_golden_file() -> None:
    check_golden("cli.txt", surface(), GOLDEN.parent)
