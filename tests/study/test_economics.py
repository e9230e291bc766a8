"""Tuning that pays for itself: the search stops once another trial is expected to cost more
GPU-hours than it saves over the production run, and every output states what tuning cost
and what the winner saves against the user's own config, or when it pays back."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pytest

from autotune.cli.options import parse_duration
from autotune.errors import InputError
from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.problem import load_problem
from autotune.space import TrainConfig, config_key
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef, problem_attrs
from autotune.study.record.trial_attrs import CONFIG_KEY, USERS_CONFIG, WALL
from autotune.study.search.economics import MIN_TRIALS, account, account_lines, expected_share
from autotune.study.search.production import PRODUCTION, Production, parse_production
from autotune.study.settings import Budget, SearchSettings
from autotune.study.verdict.figures import winner_figures
from autotune.trial.result import TrialResult
from autotune.trial.spec import TRIAL_FILE, TrialSpec
from tests.fakes import Quiet, add_measured, new_study

optuna.logging.set_verbosity(optuna.logging.ERROR)
HALF_HOUR = 1800.0


def test_a_production_run_is_a_duration_or_a_number_of_steps() -> None:
    assert parse_production("14d", parse_duration).hours == 336
    assert parse_production("1d12h", parse_duration).hours == 36
    assert parse_production("250000 steps", parse_duration).steps == 250_000
    assert parse_production("250k steps", parse_duration).steps == 250_000
    assert Production("1000 steps", steps=1000).hours_at(3.6) == 1.0
    for bad in ("2.5 steps", "many steps", "long", "0h"):
        with pytest.raises(InputError, match="--production"):
            parse_production(bad, parse_duration)


def test_a_config_that_may_beat_the_best_by_more_is_worth_more() -> None:
    best = math.log(100.0)
    below = expected_share(np.array([math.log(80.0)]), np.array([0.02]), best)
    level = expected_share(np.array([best]), np.array([0.05]), best)
    unsure = expected_share(np.array([best]), np.array([0.10]), best)
    above = expected_share(np.array([math.log(110.0)]), np.array([0.01]), best)
    assert below < 1e-6 < level < unsure < above
    assert above == pytest.approx(1 - 100 / 110, rel=0.01)  # a sure gain saves its share
    assert expected_share(np.array([]), np.array([]), best) == 0.0


class Expensive(Launcher):
    """A measured cluster where each trial holds its nodes half an hour; a config's speed
    follows its micro-batch and its layout, in ways the model half knows."""

    name = "expensive"
    source = "measured"

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "expensive"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        c = spec.config
        step = 1.0 + 0.03 * c.mbs + 0.05 * (c.tp > 1) + 0.01 * ((c.pp * 7 + c.cp * 3) % 5)
        result = TrialResult(
            source="measured", step_time_s=step, tokens_per_s=spec.workload.tokens_per_step / step,
            tflops_per_device=0.0, mfu=None, step_time_stdev_s=0.01 * step, measured_steps=3,
        )  # fmt: skip
        result.write(request.folder)
        return LaunchOutcome(kind="ok", error=None, wall_s=HALF_HOUR, result=result)


def _tuned_for(production: Production, tmp_path: Path) -> tuple[int, str]:
    problem = load_problem("megatron", "llama3-8b", "dgx-h100:4", None)
    study = new_study(between=0.02)
    for key, value in problem_attrs(problem).items():
        study.set_user_attr(key, value)
    study.set_user_attr(PRODUCTION, production.as_attr())
    outcome = run_study(
        problem,
        study,
        ref=StudyRef("s", "memory", tmp_path),
        launcher=Expensive(),
        progress=Quiet(),
        settings=SearchSettings(
            budget=Budget(trials=40, confirm=False, production=production),
            calibration=DEFAULT_CALIBRATION["hopper"],
        ),
    )
    return len(study.trials), outcome.stop_reason


def test_a_short_production_run_stops_the_search_sooner_and_says_why(tmp_path: Path) -> None:
    """32 GPUs, half an hour a trial (16 GPU-hours): over a 2-hour run no trial pays, and
    the study stops as soon as the rule may (`MIN_TRIALS`); over 30 days trials run on."""
    short, why_short = _tuned_for(parse_production("2h", parse_duration), tmp_path / "short")
    long, why_long = _tuned_for(parse_production("30d", parse_duration), tmp_path / "long")
    assert short == MIN_TRIALS and long > 10, (short, why_short, long, why_long)
    assert why_short.startswith("tuning stopped paying: another trial would cost 16 GPU-hours ")
    assert why_short.endswith(" saved over the 2h production run")


def test_the_account_states_the_saving_against_your_config_and_when_tuning_pays_back() -> None:
    """Your config measured at 100 tok/s, the winner at 125 (its repeats after the choice):
    over a 10-day run on 32 GPUs it saves a fifth of 7,680 GPU-hours; tuning cost 4 trials of
    half an hour, 64 GPU-hours, paid back after 10 hours of production."""
    problem = load_problem("megatron", "llama3-8b", "dgx-h100:4", None)
    study = new_study(between=0.02)
    for key, value in problem_attrs(problem).items():
        study.set_user_attr(key, value)
    study.set_user_attr(PRODUCTION, parse_production("10d", parse_duration).as_attr())
    yours, winner = TrainConfig(mbs=1, dp=32), TrainConfig(mbs=2, dp=32)
    add_measured(
        study, 100.0, yours, label=True, **{WALL: HALF_HOUR, CONFIG_KEY: config_key(yours)}
    )
    study.set_user_attr(USERS_CONFIG, config_key(yours))
    first = add_measured(study, 130.0, winner, label=True, **{WALL: HALF_HOUR})
    for value in (124.0, 126.0):
        add_measured(
            study,
            value,
            winner,
            label=True,
            confirms=first,
            after_choice=True,
            **{WALL: HALF_HOUR},
        )
    found = account(study, problem.cluster, winner_figures(study))
    assert found["tuning_gpu_hours"] == pytest.approx(64.0)
    ratio = math.sqrt(124.0 * 126.0) / 100.0
    assert found["saving_gpu_hours"] == pytest.approx(7680 * (1 - 1 / ratio))
    low, high = found["saving_interval_95"]
    assert low < found["saving_gpu_hours"] < high
    assert found["pays_back_after_hours"] == pytest.approx(64 / (32 * (1 - 1 / ratio)))
    lines = account_lines(found)
    assert lines[0] == "tuning cost 64 GPU-hours (8 node-hours)"
    assert lines[1].startswith("over the 10d production run the winner saves an expected 1,5")
    assert lines[2] == "tuning pays for itself after 10.0 h of production"
