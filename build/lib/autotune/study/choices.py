"""The study's parameters: one categorical per knob that varies among the valid configs,
fixed once per study (Optuna's categoricals cannot change their value lists)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution

from autotune.errors import InputError
from autotune.space import TrainConfig
from autotune.space.config import KNOBS
from autotune.space.enumerate import build_config
from autotune.space.table import ConfigTable

CHOICES_ATTR = "choices"


@dataclass(frozen=True)
class StudySpace:
    choices: dict[str, list[Any]] = field(hash=False)
    """Knob -> values, for knobs that vary among valid configs."""
    fixed: dict[str, Any] = field(hash=False)
    """Knob -> value, for knobs with one valid value (not Optuna parameters)."""

    @classmethod
    def from_valid(cls, valid: Sequence[TrainConfig]) -> StudySpace:
        table = ConfigTable.of(valid)
        seen = {knob: np.unique(getattr(table, knob)).tolist() for knob in KNOBS}
        choices = {k: sorted(v, key=_order) for k, v in seen.items() if len(v) > 1 and k != "dp"}
        fixed = {k: v[0] for k, v in seen.items() if len(v) == 1 and k != "dp"}
        return cls(choices=choices, fixed=fixed)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return {k: CategoricalDistribution(v) for k, v in self.choices.items()}

    def config(self, params: dict[str, Any], world_size: int) -> TrainConfig:
        return build_config({**self.fixed, **params}, world_size)

    def params(self, config: TrainConfig) -> dict[str, Any]:
        return {k: getattr(config, k) for k in self.choices}

    def bind(self, study: optuna.Study) -> None:
        """Store the choices in a new study, or check a resumed study has the same ones."""
        stored = study.user_attrs.get(CHOICES_ATTR)
        mine = json.loads(json.dumps(self.choices))
        if stored is None:
            study.set_user_attr(CHOICES_ATTR, mine)
        elif stored != mine:
            raise InputError(
                f"study {study.study_name!r} was searched over other choices "
                f"({stored}); the space now gives {mine}: use another --study"
            )


def _order(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, int | float) else (1, str(value))
