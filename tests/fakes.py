"""Fakes shared by tests: a study of trials autotune measured, built without running any."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.space import TrainConfig
from autotune.study.trial_attrs import CONFIG, CONFIRMS, NOISE_PRIOR, SOURCE


def new_study(between: float | None = None) -> optuna.Study:
    """An empty study that maximizes throughput; `between`: the cluster's between-trial
    spread known from earlier studies (its noise prior, 20 degrees of freedom), or none."""
    study = optuna.create_study(direction="maximize")
    if between is not None:
        study.set_user_attr(NOISE_PRIOR, {"relative": between, "dof": 20})
    return study


def measured_attrs(
    config: TrainConfig,
    *,
    step_time_s: float = 1.0,
    stdev_s: float = 0.01,
    source: str | None = "measured",
    label: bool = False,
    confirms: int | None = None,
    **more: Any,
) -> dict[str, Any]:
    """The user attributes the study loop gives a measured trial of `config` (`source=None`:
    a study from before trials recorded their source); `confirms`: the trial it repeats."""
    attrs: dict[str, Any] = {CONFIG: config.as_dict(), "step_time_s": step_time_s}
    attrs["step_time_stdev_s"] = stdev_s
    if source is not None:
        attrs[SOURCE] = source
    if label:
        attrs["label"] = config.label()
    if confirms is not None:
        attrs[CONFIRMS] = confirms
    return attrs | more


def add_measured(
    study: optuna.Study, tokens_per_s: float, config: TrainConfig, **attrs: Any
) -> int:
    """A completed trial of `config` at this throughput (`measured_attrs` for the rest);
    its number."""
    user_attrs = measured_attrs(config, **attrs)
    study.add_trial(optuna.trial.create_trial(value=tokens_per_s, user_attrs=user_attrs))
    return study.trials[-1].number


def measured_study(
    *trials: tuple[TrainConfig, float], between: float | None = None, **attrs: Any
) -> optuna.Study:
    """A study of these (config, tokens/s) trials, each with the same other attributes."""
    study = new_study(between)
    for config, tokens_per_s in trials:
        add_measured(study, tokens_per_s, config, **attrs)
    return study


class Quiet:
    """A study's progress that prints nothing."""

    def started(self, *args: object) -> None:
        pass

    def finished(self, *args: object) -> None:
        pass
