"""What "within noise" means, in one place: the confirmation of leaders, the NCCL verdict
and the guided search's stop rule all ask it here."""

from __future__ import annotations

from optuna.trial import FrozenTrial

NOISE_FLOOR = 0.02
"""Differences under 2% are noise on any shared machine, whatever the trials' own spread."""


def spread(trial: FrozenTrial) -> float:
    """Twice the relative spread of a trial's measured step times (about a 95% band)."""
    stdev, median = trial.user_attrs.get("step_time_stdev_s"), trial.user_attrs.get("step_time_s")
    return 2 * stdev / median if stdev and median else 0.0


def noise(*trials: FrozenTrial) -> float:
    """The relative difference below which these trials cannot be told apart."""
    return max(NOISE_FLOOR, *(spread(t) for t in trials))
