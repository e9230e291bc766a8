"""Fakes shared by tests: a study of trials autotune measured, built without running any."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.launchers.base import LaunchOutcome, LaunchRequest
from autotune.space import TrainConfig
from autotune.study.schema import SCHEMA_ATTR, SCHEMA_VERSION
from autotune.study.trial_attrs import CONFIG, CONFIRMS, NOISE_PRIOR, SOURCE
from autotune.trial.result import TrialResult
from autotune.trial.spec import TrialSpec


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


UNITS_CHOICES: dict[str, list[Any]] = {
    "tp": [1],
    "zero": [1, 2, 3],
    "mbs": [4, 8],
    "reduce_bucket": [50_000_000, 500_000_000],
}
"""The knobs of `units_study`: tp holds one value, mbs varies only in its failed trial."""
LONG_ERROR = "CUDA out of memory. Tried to allocate 2.00 GiB\n" + "while gathering " * 20


def units_study(storage: str | None = None, name: str = "units") -> optuna.Study:
    """A DeepSpeed study as a person reads it: four completed trials with large byte counts
    and bucket sizes, one failed with a long two-line error, one stopped early."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState

    study = optuna.create_study(direction="maximize", storage=storage, study_name=name)
    study.set_user_attr("choices", UNITS_CHOICES)
    study.set_user_attr("engine", "deepspeed")
    study.set_user_attr(SCHEMA_ATTR, SCHEMA_VERSION)
    distributions = {k: CategoricalDistribution(v) for k, v in UNITS_CHOICES.items()}
    runs = [  # zero, mbs, reduce_bucket, tokens/s, peak memory
        (2, 4, 50_000_000, 40_213.4, 466_059_123),
        (1, 4, 500_000_000, 38_002.9, 51_200_000_000),
        (3, 4, 50_000_000, 35_117.0, 21_474_836_480),
        (3, 4, 500_000_000, 31_544.2, 9_663_676_416),
        (1, 8, 500_000_000, None, None),
        (2, 4, 500_000_000, None, None),
    ]
    for i, (zero, mbs, bucket, tokens, memory) in enumerate(runs):
        config = TrainConfig(dp=8, zero=zero, mbs=mbs, reduce_bucket=bucket)
        params = {"tp": 1, "zero": zero, "mbs": mbs, "reduce_bucket": bucket}
        attrs = measured_attrs(config, step_time_s=0.0123 + i / 1000, label=True)
        state, value = TrialState.COMPLETE, tokens
        if tokens is not None:
            attrs |= {"kind": "ok", "mfu": tokens / 1e5, "peak_memory_bytes": memory}
            attrs |= {"model_state_bytes": memory // 3, "measured_steps": 12, "interval": 0.01}
        elif mbs == 8:
            state, attrs = TrialState.FAIL, attrs | {"kind": "oom", "error": LONG_ERROR}
        else:
            state = TrialState.PRUNED
            attrs |= {"pruned_as": "stopped_early", "pruned_reason": "surely slower than trial 0"}
        study.add_trial(
            optuna.trial.create_trial(
                state=state,
                value=value,
                params=params,
                distributions=distributions,
                user_attrs=attrs,
            )
        )
    return study


def measured_outcome(
    request: LaunchRequest, spec: TrialSpec, step: float, **more: Any
) -> LaunchOutcome:
    """What a fake launcher returns: a measured trial of `step` seconds a step (3 measured
    steps, 1% spread; `more` sets other fields), written to the trial's folder as a real
    launch writes it."""
    result = TrialResult(
        source="measured",
        step_time_s=step,
        tokens_per_s=spec.workload.tokens_per_step / step,
        tflops_per_device=0.0,
        mfu=None,
        step_time_stdev_s=0.01 * step,
        measured_steps=3,
        **more,
    )
    result.write(request.folder)
    return LaunchOutcome(kind="ok", error=None, wall_s=1.0, result=result)
