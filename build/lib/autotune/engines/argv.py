"""Reading and rewriting `--flag VALUE` / `--flag=VALUE` in a user's command. Pure.

One rule everywhere, as argparse has it: a flag given twice takes its last value. A flag may
have several spellings (`Flag`: a tuple of them), as one argparse option has several option
strings (Hugging Face's `HfArgumentParser._parse_dataclass_field` gives each field
`--name_with_underscores` and `--name-with-hyphens`): any of them sets it, the last one
given wins, and a flag is rewritten in the spelling the command gave it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Flag = str | tuple[str, ...]
"""A flag's one spelling, or all of them (the first is the one appended)."""


def hf_flag(field: str) -> tuple[str, str]:
    """A dataclass field's option strings, as `HfArgumentParser` gives them
    (transformers/hf_argparser.py, `_parse_dataclass_field`): `--field_name` and, where the
    name has an underscore, `--field-name`."""
    return f"--{field}", f"--{field.replace('_', '-')}"


def spellings(flag: Flag) -> tuple[str, ...]:
    return (flag,) if isinstance(flag, str) else flag


def flag_positions(argv: Sequence[str], flag: Flag) -> list[tuple[int, int | None]]:
    """Every place `flag` is given, in any of its spellings: (index of the flag, index of
    its value or None for a `--flag=VALUE` or a switch at the end)."""
    names = spellings(flag)
    found: list[tuple[int, int | None]] = []
    for i, arg in enumerate(argv):
        if arg.partition("=")[0] in names and "=" in arg:
            found.append((i, None))
        elif arg in names:
            found.append((i, i + 1 if i + 1 < len(argv) else None))
    return found


def flag_value(argv: Sequence[str], flag: Flag) -> str | None:
    """The value of `--flag VALUE` or `--flag=VALUE`, in any spelling (the last one given
    wins)."""
    positions = flag_positions(argv, flag)
    if not positions:
        return None
    at, value = positions[-1]
    if value is None:
        return argv[at].partition("=")[2] if "=" in argv[at] else None
    return argv[value]


def has_flag(argv: Sequence[str], flag: Flag) -> bool:
    return bool(flag_positions(argv, flag))


def with_flag(argv: Sequence[str], flag: Flag, value: str) -> list[str]:
    """`argv` with `flag` set to `value`: where it was last given, in the spelling given
    there, else appended in its first spelling."""
    out = list(argv)
    positions = flag_positions(out, flag)
    if not positions:
        return [*out, spellings(flag)[0], value]
    at, value_at = positions[-1]
    if value_at is None:
        out[at] = f"{out[at].partition('=')[0]}={value}"
    else:
        out[value_at] = value
    return out


VARIADIC = -1
"""An arity: every value up to the next flag (argparse's nargs='+')."""
OPTIONAL = -2
"""An arity: one value where the next word is not a flag (argparse's nargs='?', as
`HfArgumentParser` gives a bool field: `--push_to_hub` alone or `--push_to_hub false`)."""


def without_flags(argv: Sequence[str], arity: Mapping[str, int]) -> list[str]:
    """`argv` without the flags named in `arity` (flag -> how many values follow it, or
    `VARIADIC` or `OPTIONAL`)."""
    out: list[str] = []
    skip = 0
    for arg in argv:
        if skip in (VARIADIC, OPTIONAL) and not arg.startswith("-"):
            skip = VARIADIC if skip == VARIADIC else 0
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
