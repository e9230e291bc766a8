"""How a slice study ranks: configs measured at full size (its confirmed leaders) apart
from those ranked on the slice, and first when the winner is named."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.study.record.trial_attrs import RANKED_BY, SLICE_STUDY
from autotune.study.verdict.confirm import Standing, standings


def full_size(ranked: list[Any]) -> list[Any]:
    """The standings measured at full size (a slice study's confirmed leaders)."""
    return [s for s in ranked if s.trial.user_attrs.get(RANKED_BY) == "full"]


def full_first(ranked: list[Any]) -> list[Any]:
    """Standings with the configs measured at full size first (a slice study's confirmed
    leaders): the winner is one the whole cluster ran, when any did."""
    full = full_size(ranked)
    return full + [s for s in ranked if s not in full] if full else ranked


def is_slice_study(study: optuna.Study) -> bool:
    return study.user_attrs.get(SLICE_STUDY) is not None


def full_standings(study: optuna.Study) -> list[Standing]:
    """The standings of configs measured at full size, best first: a confirmed slice
    study's winner is chosen from them, its slice trials (extrapolated) standing apart."""
    return full_size(standings(study))


def slice_standings(study: optuna.Study) -> list[Standing]:
    """The standings of configs measured on the slice (or ranked by the model), best
    first: the leaders repeated there, which a config's full-size launches never join;
    ranked as measured, as a study that names its winner on the slice ranks them."""
    full = full_size(ranked := standings(study))
    return [s for s in ranked if s not in full]
