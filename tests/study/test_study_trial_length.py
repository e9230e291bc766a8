"""What a measured study asks of each trial's length: no tighter than launches differ,
repeats of the leaders profiled only where their config has no profile yet, and a
runner-up's repeat measured only as long as ranking it against the best needs."""

from __future__ import annotations

import math
from pathlib import Path

import optuna

from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.problem import load_problem
from autotune.space import config_key
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.record.trial_attrs import AFTER_CHOICE, CONFIRMS
from autotune.study.settings import Budget, SearchSettings
from autotune.study.verdict.noise import UNKNOWN_BETWEEN
from autotune.trial.spec import TRIAL_FILE, StepPlan, TrialSpec
from tests.fakes import Quiet, measured_outcome, new_study

optuna.logging.set_verbosity(optuna.logging.ERROR)
CAL = DEFAULT_CALIBRATION["hopper"]


class RecordsPlans(Launcher):
    """A measured cluster whose launches of one config land 10% apart, in turn above and
    below its level; it keeps the step plan each trial was given."""

    name = "records"
    source = "measured"

    def __init__(self) -> None:
        self.plans: list[tuple[str, StepPlan]] = []

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "recorded"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        key = config_key(spec.config)
        seen = sum(k == key for k, _ in self.plans)
        self.plans.append((key, spec.steps))
        step = (1.0 + 0.01 * len(key) % 7) * math.exp(0.1 if seen % 2 else -0.1)
        return measured_outcome(
            request,
            spec,
            step,
            step_times_s=(step, step, step),
            stopped_for="precise",
            profile={"step_time_s": step, "comm_s": 0.1, "compute_s": step - 0.1}
            if spec.steps.profile
            else None,
        )


def studied(
    tmp_path: Path, budget: Budget, between: float | None = None, steps: StepPlan | None = None
) -> tuple[optuna.Study, RecordsPlans]:
    """A guided study of Llama 3 8B on the recording cluster, from the cluster's prior
    between-trial spread `between`, its trials' plan `steps` where given."""
    study = new_study(between)
    launcher = RecordsPlans()
    run_study(
        load_problem("torch", "llama3-8b", "dgx-h100:1"),
        study,
        ref=StudyRef("t", "memory", tmp_path),
        launcher=launcher,
        progress=Quiet(),
        settings=SearchSettings(budget=budget, calibration=CAL, steps=steps or StepPlan()),
    )
    return study, launcher


def test_trials_measure_to_the_spread_and_repeats_skip_a_second_profile(tmp_path: Path) -> None:
    study, launcher = studied(tmp_path, Budget(trials=4), between=0.08)
    repeats = [t for t in study.get_trials() if CONFIRMS in t.user_attrs]
    assert repeats, "leaders 10% apart in 8% noise are repeated"
    assert len(launcher.plans) == 4 + len(repeats)
    # Launches differ by 8% or more: no trial is held to the 2% precision asked.
    assert all(plan.precision >= 0.08 for _, plan in launcher.plans)
    # Each config's first trial that could win was profiled; a repeat of one is not.
    profiled_first = {key for key, plan in launcher.plans[:4] if plan.profile}
    assert profiled_first
    assert not any(plan.profile for key, plan in launcher.plans[4:] if key in profiled_first)


def test_a_runner_ups_repeat_is_ranked_against_the_best_and_never_stopped(
    tmp_path: Path,
) -> None:
    asked = StepPlan(margin=0.1)  # a margin the repeats must not take up
    study, launcher = studied(tmp_path, Budget(trials=4), between=0.08, steps=asked)
    repeats = [t for t in study.get_trials() if CONFIRMS in t.user_attrs]
    plans = [plan for _, plan in launcher.plans[4:]]
    assert len(plans) == len(repeats)
    assert all(plan.margin is None for plan in plans), "a repeat is never stopped as slower"
    # The winner's repeats after its choice state its figures: measured to full precision.
    paired = list(zip(repeats, plans, strict=True))
    assert all(p.best_s is None for t, p in paired if t.user_attrs.get(AFTER_CHOICE))
    # A runner-up's is measured against the best's mean step time (a 10% gap: 5% will do).
    assert any(p.best_s is not None for _, p in paired)


def test_before_any_spread_is_known_trials_assume_a_shared_machines(tmp_path: Path) -> None:
    _, launcher = studied(tmp_path, Budget(trials=2, confirm=False))
    assert [plan.precision for _, plan in launcher.plans] == [UNKNOWN_BETWEEN] * 2
