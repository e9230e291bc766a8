"""The one place values are quoted for a shell: launch scripts, sbatch files, env files."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from autotune.errors import InputError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def quote(value: object) -> str:
    return shlex.quote(str(value))


def comment(text: object) -> str:
    """A `#` comment line of any text: line breaks and other control characters, which
    would end the comment and start a command, are written as escapes."""
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return f"# {safe}"


def sbatch_line(option: str) -> str:
    """An `#SBATCH` line; sbatch reads it like a shell word, but a line break in it would
    end the comment and start a command, so one is refused."""
    if any(c in option for c in "\n\r\0"):
        raise InputError(f"sbatch option {option!r}: line breaks are not allowed")
    return f"#SBATCH {quote(option)}"


def join(argv: Sequence[object]) -> str:
    return " ".join(quote(a) for a in argv)


def exports(env: Mapping[str, str]) -> str:
    """`export NAME=value` lines; names are checked, values quoted."""
    lines = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise InputError(f"not an environment variable name: {name!r}")
        lines.append(f"export {name}={quote(value)}")
    return "\n".join(lines)
