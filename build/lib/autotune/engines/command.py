"""The user's own training command (`autotune run -- train.py ...`): checked, and handed to
the framework that runs it. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from autotune.engines import frameworks_of
from autotune.engines.framework import Framework
from autotune.errors import InputError
from autotune.trial.spec import UserJob

LAUNCHER_WORDS = frozenset({"deepspeed", "torchrun", "accelerate", "mpirun", "srun"})


def framework_for(engine: str, command: Sequence[str]) -> Framework:
    """The framework of `engine` that recognises `command`; its fallback where none does."""
    candidates = frameworks_of(engine)
    for framework in sorted(candidates, key=lambda f: f.fallback):
        if framework.fallback or framework.recognises(command):
            return framework
    raise InputError(
        f"the {engine} engine runs no user's command of this kind"
        f" ({', '.join(f.name for f in candidates) or 'no framework'})"
    )


def parse_job(argv: Sequence[str], workdir: Path, engine: str) -> UserJob:
    """The user's command, checked (a script or module that exists, no launcher of its
    own), then read by its framework."""
    command = list(argv)
    if command and re.fullmatch(r"python[\d.]*", Path(command[0]).name):
        command = command[1:]
    if not command:
        raise InputError("after --, give your training script and its arguments")
    if command[0].startswith("-") and command[0] != "-m":
        raise InputError(
            f"interpreter option {command[0]!r}: give the script (or -m MODULE) right after "
            "python; set Python options in the environment (e.g. PYTHONUNBUFFERED)"
        )
    if Path(command[0]).name in LAUNCHER_WORDS:
        raise InputError(
            f"autotune starts the ranks itself (torchrun): drop {command[0]!r} and give the "
            "script, e.g. `-- train.py --deepspeed_config ds_config.json`"
        )
    if command[0] == "-m":
        if len(command) < 2:
            raise InputError("after -- -m, name the module to run")
    elif not (workdir / command[0]).is_file():
        raise InputError(f"training script {command[0]!r} does not exist in {workdir}")
    return framework_for(engine, command).parse(command, workdir)
