"""Fakes shared by tests: a study of trials autotune measured, built without running any."""

from __future__ import annotations

import math
import random
from typing import Any

import optuna

from autotune.export.scripts import simulated_banner
from autotune.launchers import ExportContext, exported_files
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.space import TrainConfig, config_key
from autotune.study.record._schema import SCHEMA_ATTR, SCHEMA_VERSION
from autotune.study.record.trial_attrs import CONFIG, CONFIRMS, NOISE_PRIOR, SOURCE, USERS_CONFIG
from autotune.study.trial_run import QuietProgress
from autotune.trial.result import TrialResult
from autotune.trial.spec import TRIAL_FILE, TrialSpec


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


Quiet = QuietProgress
"""A study's progress that prints nothing."""

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
        attrs = measured_attrs(
            config, step_time_s=0.0123 + i / 1000, label=True, config_key=config_key(config)
        )
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


class LossWorld(Launcher):
    """A measured cluster running a user's script that tells its loss: every config trains
    the same curve, a dropout-like jitter that grows with the steps (drawn from the config's
    micro-batch grouping, or from the reseed of a reseeded run) on top, unless it moves a
    knob of `breaks` off the user's value: then the loss drifts 3% away by the end (the
    script's learning rate follows that knob), from step `shows_after` on (a learning rate
    inside a long warm-up shows late). `crashes`: knob values whose trials crash alike;
    `fail_users`: launches of the user's config (the first ones) that fail, as
    `users_fail_as` (crash, or oom). Each trial runs as long as its plan's measured steps and
    warm-up, and stops early where its parity plan says its loss left the user's, as a rank
    does. Its step time follows the ZeRO stage, overlap and micro-batch, so the search has
    something to find."""

    name = "losses"
    source = "measured"

    def __init__(
        self,
        users: TrainConfig,
        breaks: tuple[str, ...] = (),
        crashes: dict[str, Any] | None = None,
        fail_users: int = 0,
        users_fail_as: str = "crash",
        shows_after: int = 0,
    ) -> None:
        self.users, self.breaks, self.crashes = users, breaks, crashes or {}
        self.fail_users, self.users_fail_as = fail_users, users_fail_as
        self.shows_after = shows_after
        self.specs: list[TrialSpec] = []

    def curve(self, spec: TrialSpec, steps: int) -> tuple[float, ...]:
        config = spec.config
        moved = any(getattr(config, k) != getattr(self.users, k) for k in self.breaks)
        seed = spec.parity.reseed if spec.parity.reseed is not None else config.mbs
        jitter = random.Random(seed)
        losses = []
        for step in range(steps):
            grown = 0.0 if step == 0 else 1e-4 * math.exp(step / 6)  # chaos amplifies it
            if spec.parity.reseed is None and config.mbs == self.users.mbs:
                grown = 0.0  # the user's own grouping: the same draws
            loss = (6.0 - 0.05 * step) * (1 + grown * jitter.uniform(-1, 1))
            late = max(0, step - self.shows_after)
            losses.append(loss * (1 + 0.03 * late / 10) if moved else loss)
        return tuple(losses)

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        self.specs.append(spec)
        config = spec.config
        if config == self.users and self.fail_users > 0:
            self.fail_users -= 1
            error = "cache not built yet" if self.users_fail_as == "crash" else "out of memory"
            return LaunchOutcome(kind=self.users_fail_as, error=error, wall_s=1.0)  # type: ignore[arg-type]
        for knob, value in self.crashes.items():
            if getattr(config, knob) == value:
                error = f"RuntimeError: view size is not compatible with {id(spec)} strides"
                return LaunchOutcome(kind="crash", error=error, wall_s=1.0)
        plan = spec.steps
        steps = plan.min_warmup + plan.measured_steps + 1
        losses = self.curve(spec, steps)
        over = next(
            (i + 1 for i, loss in enumerate(losses) if spec.parity.over(i + 1, loss)), None
        )
        stopped = "cap"
        if over is not None:  # the rank stops once its speed is measured
            steps = max(over, plan.min_warmup + plan.min_measured + 1)
            losses, stopped = losses[:steps], "differs"
        step = 0.1 * (1 + 0.1 * config.zero) * (1.02 if config.overlap_comm else 1.0)
        step *= 1.1 if config.mbs < 4 else 1.0  # small micro-batches run slower
        return measured_outcome(request, spec, step, losses=losses, stopped_for=stopped)

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "losses"]


def sample_study() -> optuna.Study:
    """A default study as the getting-started page shows it: the user's config, six search
    trials, the winner repeated twice and the runner-up once, on a cluster whose launches
    differ by about 6%."""
    study = new_study(between=0.06)
    study.set_user_attr("engine", "deepspeed")
    yours = TrainConfig(dp=2, zero=0, mbs=4)
    winner = TrainConfig(dp=2, zero=2, mbs=8, overlap_comm=True)
    runner_up = TrainConfig(dp=2, zero=1, mbs=8)
    rows: list[tuple[TrainConfig, float, dict[str, Any]]] = [
        (yours, 38_020.0, {}),
        (runner_up, 41_310.0, {}),
        (winner, 44_626.0, {}),
        (TrainConfig(dp=2, zero=3, mbs=8), 30_402.0, {}),
        (TrainConfig(dp=2, zero=2, mbs=4), 40_088.0, {}),
        (winner, 44_101.0, {"confirms": 2}),
        (runner_up, 41_702.0, {"confirms": 1}),
        (winner, 45_012.0, {"confirms": 2}),
    ]
    for config, tokens, more in rows:
        key = config_key(config)
        extra = {"mfu": tokens / 225_000, "kind": "ok", **more}
        add_measured(study, tokens, config, label=True, config_key=key, **extra)
    study.set_user_attr(USERS_CONFIG, config_key(yours))
    return study


def sbatch_text(spec: TrialSpec, trial: optuna.trial.FrozenTrial, study_name: str) -> str:
    """train.sbatch as the export writes it for a study on SLURM whose winner is `trial`,
    where the spec's cluster file says (its `slurm:` section)."""
    context = ExportContext(
        spec=spec,
        study_name=study_name,
        name=f"trial {trial.number}",
        banner=tuple(simulated_banner(trial)),
    )
    return exported_files(["slurm"], context)["train.sbatch"]
