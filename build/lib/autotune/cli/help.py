"""Help that reads well: a command whose options come in named groups, each default as the
value a user would type, and names (engines, launchers, samplers) completed by the shell and
taken in any case."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem

OTHER = "Other options"
_STATED_DEFAULT = re.compile(r"\s*\[default: ([^\]]+)\]\.?")


class GroupedCommand(click.Command):
    """A click command whose `--help` lists its options under `groups` (title -> option
    names, by their parameter name), in that order, the rest under "Other options"."""

    def __init__(
        self, *args: Any, groups: Sequence[tuple[str, Sequence[str]]] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.groups = tuple((title, tuple(names)) for title, names in groups)

    def option_groups(self, ctx: click.Context) -> list[tuple[str, list[click.Parameter]]]:
        """Every option of the command, once, in its group."""
        options: list[click.Parameter] = [
            p for p in self.get_params(ctx) if isinstance(p, click.Option)
        ]
        by_name = {p.name: p for p in options}
        grouped = [
            (title, [by_name[n] for n in names if n in by_name]) for title, names in self.groups
        ]
        placed = {p.name for _title, members in grouped for p in members}
        rest = [p for p in options if p.name not in placed]
        return [(t, m) for t, m in (*grouped, (OTHER, rest)) if m]

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for title, members in self.option_groups(ctx):
            rows = [row for row in (p.get_help_record(ctx) for p in members) if row]
            with formatter.section(title):
                formatter.write_dl(rows)


def default_text(param: click.Parameter, ctx: click.Context) -> str:
    """A parameter's default as the user would type it; "" where it has none to show (the
    default is then said in its help, `[default: ...]`, and read from there)."""
    help_text = getattr(param, "help", None) or ""
    stated = _STATED_DEFAULT.search(help_text)
    if stated:
        return stated.group(1)
    if isinstance(param, click.Option):
        if isinstance(param.show_default, str):
            return param.show_default
        if param.is_flag and param.secondary_opts:
            return param.opts[0] if param.default else param.secondary_opts[0]
        if param.is_flag:
            return ""
    value = param.get_default(ctx, call=False)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bool | int | float | str) and value != "":
        return str(value)
    return ""


def help_without_default(param: click.Parameter) -> str:
    """The help text less its `[default: ...]`, which the reference shows in its own column."""
    return _STATED_DEFAULT.sub("", getattr(param, "help", None) or "").strip()


def lowered(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A name taken in any case (`--engine DeepSpeed`)."""
    return value.lower() if isinstance(value, str) else value


def completing(names: Callable[[], Iterable[str]]) -> Callable[..., list[CompletionItem]]:
    """A shell completion of the registered `names` (read when completing, so a plugin
    registered later is offered too)."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        start = incomplete.lower()
        return [CompletionItem(name) for name in names() if name.startswith(start)]

    return complete
