"""Launchers start a trial's processes, enforce its time limit and classify the outcome.

A launcher is registered here, by its `name`; `autotune run --launcher NAME` and the
contract tests (tests/contract/test_launcher_contract.py) find it in `LAUNCHERS`."""

from autotune.errors import InputError, did_you_mean
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest, LaunchSettings
from autotune.launchers.local import LocalLauncher
from autotune.launchers.replay import ReplayLauncher
from autotune.launchers.simulate import SimulateLauncher
from autotune.launchers.slurm import SlurmLauncher

LAUNCHERS: dict[str, type[Launcher]] = {
    c.name: c for c in (LocalLauncher, SlurmLauncher, SimulateLauncher, ReplayLauncher)
}


def get_launcher(name: str, settings: LaunchSettings | None = None) -> Launcher:
    if name not in LAUNCHERS:
        hint = did_you_mean(name, LAUNCHERS)
        raise InputError(f"unknown launcher {name!r}; launchers: {', '.join(LAUNCHERS)}{hint}")
    return LAUNCHERS[name].build(settings or LaunchSettings())


__all__ = [
    "LAUNCHERS",
    "LaunchOutcome",
    "LaunchRequest",
    "LaunchSettings",
    "Launcher",
    "get_launcher",
]
