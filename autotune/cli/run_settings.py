"""`autotune run`'s options as click reads them, and the settings `tune` takes from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.cli.options import parse_duration, step_plan
from autotune.study.search.production import parse_production

if TYPE_CHECKING:
    from autotune.problem import Problem
    from autotune.study import Budget
    from autotune.tune import TuneSettings


@dataclass(frozen=True)
class RunOptions:
    """`autotune run`'s options as click reads them."""

    engine: str
    model: str
    cluster: str
    space: str | None
    launcher: str
    n_trials: int | None
    max_time: str | None
    production: str | None
    timeout_per_trial: str
    study_name: str | None
    storage: str | None
    results: Path
    sampler: str
    seed: int | None
    early_stop: bool
    early_stop_margin: float
    confirm: bool
    thorough: bool
    measured_steps: int | None
    precision: float
    trial_nodes: int | None
    confirm_full: int
    scale_probes: int
    users_config: str
    node_check: bool
    command: tuple[str, ...]
    launcher_flags: Mapping[str, Mapping[str, Any]]
    """Each launcher's own flags (`--partition` for slurm, `--table` for replay)."""


def tune_settings(problem: Problem, options: RunOptions) -> TuneSettings:
    """What `tune` takes, from the problem and `autotune run`'s options."""
    from autotune.launchers import LaunchSettings
    from autotune.study.slice.trials import SliceSettings
    from autotune.tune import TuneSettings

    return TuneSettings(
        budget=budget(options),
        launcher=options.launcher,
        launch=LaunchSettings(
            gpus=problem.cluster.backend == "nccl",
            cluster=problem.cluster,
            flags=options.launcher_flags,
        ),
        steps=step_plan(options.measured_steps, options.precision),
        study_name=options.study_name,
        storage=options.storage,
        results=options.results,
        sampler=options.sampler,
        seed=options.seed,
        slice=(
            SliceSettings(options.trial_nodes, options.confirm_full, probes=options.scale_probes)
            if options.trial_nodes is not None
            else None
        ),
        node_check=options.node_check,
    )


def budget(options: RunOptions) -> Budget:
    """The study's budget from `autotune run`'s options."""
    from autotune.study import Budget
    from autotune.study.verdict.effort import STANDARD, THOROUGH

    per_trial_s = parse_duration(options.timeout_per_trial, "--timeout-per-trial")
    assert per_trial_s is not None  # the option has a default
    return Budget(
        trials=options.n_trials or default_trials(options.thorough, bool(options.command)),
        max_time_s=parse_duration(options.max_time, "--max-time"),
        timeout_per_trial_s=per_trial_s,
        early_stop_margin=options.early_stop_margin if options.early_stop else None,
        confirm=options.confirm,
        effort=THOROUGH if options.thorough else STANDARD,
        production=(
            parse_production(options.production, parse_duration) if options.production else None
        ),
    )


def default_trials(thorough: bool, command: bool) -> int:
    """The trial budget without --trials: 8, or 4 for a user's command (each trial relaunches
    their job); a thorough study's `THOROUGH_TRIALS`, halved for a command."""
    from autotune.study import COMMAND_TRIALS, Budget
    from autotune.study.verdict.effort import THOROUGH_TRIALS

    if thorough:
        return THOROUGH_TRIALS // 2 if command else THOROUGH_TRIALS
    trials = COMMAND_TRIALS if command else Budget().trials
    assert trials is not None
    return trials
