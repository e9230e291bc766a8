"""How a rank's failure is named and reported: the exceptions workers raise for what is not
a crash, the kind of failure an exception means, `error-rank<N>.json`, and the check that
every rank runs with the trial's NCCL settings."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from autotune.trial.spec import (
    FAULT_ENV,
    NCCL_TUNED,
    TrialSpec,
    nccl_environment,
    write_atomically,
)


def check_nccl_environment(spec: TrialSpec, rank: int) -> None:
    """Every rank must run with the NCCL settings the trial chose: a variable set differently
    on one node silently changes what is measured, or hangs the collective."""
    if os.environ.get(FAULT_ENV) == "nccl_env" and rank == 1:
        os.environ["NCCL_ALGO"] = "Tree"  # test hook: one rank with a setting of its own
    everyone: list[dict[str, str | None]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(everyone, my_nccl_environment())
    for other, env in enumerate(everyone):
        if wrong := nccl_mismatch(spec, env, other):
            raise wrong


def my_nccl_environment() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in NCCL_TUNED}


def nccl_mismatch(
    spec: TrialSpec, env: dict[str, str | None], rank: int
) -> LaunchEnvironmentError | None:
    """What is wrong with one rank's NCCL settings (`env`) for this trial, if anything."""
    expected = nccl_environment(spec)
    for name in NCCL_TUNED:
        value = expected.get(name)
        if env.get(name) != value:
            return LaunchEnvironmentError(
                f"{name} is {env.get(name) or 'unset'} on rank {rank} but the trial sets it "
                f"{value or 'unset'}: every rank must run with the trial's NCCL settings"
            )
    return None


class LaunchEnvironmentError(RuntimeError):
    """The ranks were started with an environment the trial did not ask for."""


class ScriptError(RuntimeError):
    """A user's script cannot run at all, whatever the config."""


class NoStepsError(RuntimeError):
    """A user's script ended before the trial's steps were measured."""


class ConfigIgnoredError(RuntimeError):
    """A user's script runs with settings other than the trial's: it does not read the config
    file it was given, so no trial of it can measure a config."""


def classify_exception(exc: BaseException) -> str:
    """oom, launch_error, config_ignored, no_steps, script_error, comm_error or crash, from
    the exception a rank died of."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return "oom"
    if isinstance(exc, LaunchEnvironmentError):
        return "launch_error"
    if isinstance(exc, ConfigIgnoredError):
        return "config_ignored"
    if isinstance(exc, NoStepsError):
        return "no_steps"
    if isinstance(exc, ScriptError):
        return "script_error"
    text = str(exc)
    if isinstance(exc, dist.DistError) or any(
        marker in text
        for marker in ("gloo", "NCCL", "Connection closed by peer", "Connection reset")
    ):
        return "comm_error"
    return "crash"


def write_error(folder: Path, rank: int, exc: BaseException, kind: str | None = None) -> None:
    lines = str(exc).strip().splitlines()
    record = {
        "rank": rank,
        "kind": kind or classify_exception(exc),
        "time": time.time(),
        "error": f"{type(exc).__name__}: {lines[0] if lines else ''}".strip(),
    }
    write_atomically(folder / f"error-rank{rank}.json", json.dumps(record) + "\n")
