"""The Optuna user attributes autotune keeps on a trial, named once: the loop that writes
them and the table, report, export, confirmation and dashboard that read them agree here."""

from __future__ import annotations

from enum import StrEnum

from optuna.trial import FrozenTrial, TrialState

CONFIG = "config"
"""The trial's knobs, as `TrainConfig.as_dict()`."""
CONFIG_KEY = "config_key"
"""The config's identity (`space.config_key`), set once the trial runs: its verdict."""
CLAIM = "claim"
"""The config a running trial holds, so two workers never measure it both."""
KIND = "kind"
"""The outcome kind: ok, oom, crash, ... (`trial.spec.OUTCOMES`), or interrupted."""
ERROR = "error"
CONFIRMS = "confirms"
"""On a confirmation: the number of the trial it re-measures for longer."""
SOURCE = "source"
"""measured, simulated or replayed."""
LABEL = "label"
OWNER = "owner"
"""Host, pid and start time of the tuner that runs the trial."""
FOLDER = "folder"
PREDICTED = "predicted"
"""The model's step time, memory and step breakdown for the config."""
SEEDED_BY = "seeded_by"
PRUNED_AS = "pruned_as"
"""Why a trial is PRUNED, as a `Pruned` value; `PRUNED_REASON` says it in words."""
PRUNED_REASON = "pruned_reason"
WALL = "wall_s"
"""The trial's wall time as its launcher saw it, from launch to the processes' end."""
PHASES = "phases_s"
"""The worker's clock: seconds per phase of a measured trial (`TrialResult.phases_s`)."""
NOISE_PRIOR = "noise_prior"
"""On the study: the cluster's between-trial spread from earlier studies (`noise.Spread` as a
dict), pooled with the study's own repeats in every verdict."""
USERS_CONFIG = "users_config"
"""On the study: the config key of the config the user's own command runs today (measured
first; the summary compares the winner with it)."""
STOPPED_FOR = "stopped_for"
"""Why a measured trial stopped measuring (`trial.length`): precise, slower or cap."""


class Pruned(StrEnum):
    """Optuna's PRUNED state stands for three things here."""

    REJECTED = "rejected"
    """Not run: it breaks a rule, is predicted not to fit, or its config has a verdict."""
    CLAIMED = "claimed"
    """Not run: another worker holds the config (or took the queued trial)."""
    STOPPED_EARLY = "stopped_early"
    """Ran, and was stopped once clearly slower than the best: studies from before trials
    measured their own length (now such a trial completes with `STOPPED_FOR` slower)."""


def pruned_as(trial: FrozenTrial) -> Pruned | None:
    """Why a trial was pruned; studies from before the attribute: a trial that ran (it has a
    config key) was stopped early, any other was not run."""
    if trial.state != TrialState.PRUNED:
        return None
    if PRUNED_AS in trial.user_attrs:
        return Pruned(trial.user_attrs[PRUNED_AS])
    return Pruned.STOPPED_EARLY if CONFIG_KEY in trial.user_attrs else Pruned.REJECTED
