"""Reading and rewriting `--flag VALUE` / `--flag=VALUE` in a user's command. Pure.

One rule everywhere, as argparse has it: a flag given twice takes its last value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def flag_positions(argv: Sequence[str], flag: str) -> list[tuple[int, int | None]]:
    """Every place `flag` is given: (index of the flag, index of its value or None for a
    `--flag=VALUE` or a switch at the end)."""
    found: list[tuple[int, int | None]] = []
    for i, arg in enumerate(argv):
        if arg.startswith(flag + "="):
            found.append((i, None))
        elif arg == flag:
            found.append((i, i + 1 if i + 1 < len(argv) else None))
    return found


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of `--flag VALUE` or `--flag=VALUE` (the last one given wins)."""
    positions = flag_positions(argv, flag)
    if not positions:
        return None
    at, value = positions[-1]
    if value is None:
        return argv[at].partition("=")[2] if "=" in argv[at] else None
    return argv[value]


def has_flag(argv: Sequence[str], flag: str) -> bool:
    return bool(flag_positions(argv, flag))


def with_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """`argv` with `flag` set to `value`: where it was last given, else appended."""
    out = list(argv)
    positions = flag_positions(out, flag)
    if not positions:
        return [*out, flag, value]
    at, value_at = positions[-1]
    if value_at is None:
        out[at] = f"{flag}={value}"
    else:
        out[value_at] = value
    return out


VARIADIC = -1
"""An arity: every value up to the next flag (argparse's nargs='+')."""


def without_flags(argv: Sequence[str], arity: Mapping[str, int]) -> list[str]:
    """`argv` without the flags named in `arity` (flag -> how many values follow it, or
    `VARIADIC`)."""
    out: list[str] = []
    skip = 0
    for arg in argv:
        if skip == VARIADIC and not arg.startswith("-"):
            continue
        if skip > 0:
            skip -= 1
            continue
        skip = 0
        name = arg.partition("=")[0]
        if name in arity:
            skip = 0 if "=" in arg else arity[name]
            continue
        out.append(arg)
    return out
