"""The one place values are quoted for a shell: launch scripts, sbatch files, env files."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def quote(value: object) -> str:
    return shlex.quote(str(value))


def join(argv: Sequence[object]) -> str:
    return " ".join(quote(a) for a in argv)


def exports(env: Mapping[str, str]) -> str:
    """`export NAME=value` lines; names are checked, values quoted."""
    lines = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"not an environment variable name: {name!r}")
        lines.append(f"export {name}={quote(value)}")
    return "\n".join(lines)
