"""The guided search as an Optuna sampler in a study of the user's own: `study.optimize` over
an objective that measures a config in a simulated world (the model's prediction times what
the model does not know: each layout's own error of up to 14%, TP >= 4 a class 12% slower),
with an autotune problem's space and model as the prior."""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable

import optuna
import pytest

from autotune.estimate.calibration import default_calibration
from autotune.estimate.predict import predict
from autotune.problem import Problem, load_problem
from autotune.space import TrainConfig, config_key
from autotune.space.table import ConfigTable
from autotune.study.search.guided import GuidedSampler

optuna.logging.set_verbosity(optuna.logging.ERROR)
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def problem() -> Problem:
    return load_problem("deepspeed", "llama3-8b", "dgx-h100:1")


def _layout_error(config: TrainConfig) -> float:
    key = f"{config.tp},{config.pp},{config.zero},{config.mbs},{config.recompute}"
    u = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 2**32
    return math.exp(0.136 * (2 * u - 1))


@pytest.fixture(scope="module")
def world(problem: Problem) -> dict[str, float]:
    """Each config that fits: its true tokens/s."""
    valid = problem.enumerate().valid
    cal = default_calibration(problem.cluster.device.generation, problem.engine.traits)
    model = predict(
        problem.workload, ConfigTable.of(valid), problem.cluster, problem.engine.traits, cal
    )
    truth = {}
    for i, config in enumerate(valid):
        row = model.row(i)
        if row.fits:
            speed = problem.workload.tokens_per_step / row.step.total_s
            bias = 0.88 if config.tp >= 4 else 1.0
            truth[config_key(config)] = speed * _layout_error(config) * bias
    return truth


def _objective(
    problem: Problem, world: dict[str, float], config_of: Callable[[optuna.Trial], TrainConfig]
) -> Callable[[optuna.Trial], float]:
    def measure(trial: optuna.Trial) -> float:
        speed = world.get(config_key(config_of(trial)))
        if speed is None:  # does not fit: as a user's objective would, it gives up the trial
            raise optuna.TrialPruned()
        return speed

    return measure


def _regret(study: optuna.Study, world: dict[str, float]) -> float:
    found = max((t.value for t in study.trials if t.value is not None), default=0.0)
    return 1 - found / max(world.values())


def test_a_plain_optuna_study_with_it_beats_random_sampling(
    problem: Problem, world: dict[str, float]
) -> None:
    guided, random = [], []
    for seed in SEEDS:
        sampler = GuidedSampler(problem, seed=seed)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.optimize(_objective(problem, world, sampler.suggest), n_trials=8)
        guided.append(_regret(study, world))
        assert all(t.value is not None for t in study.trials)  # it proposes configs that fit
        plain = optuna.create_study(
            direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed)
        )
        plain.optimize(_objective(problem, world, sampler.suggest), n_trials=8)
        random.append(_regret(plain, world))
    assert max(guided) < 0.03, guided
    assert all(g < r for g, r in zip(guided, random, strict=True)), (guided, random)
    assert statistics.median(random) > 0.1, random


def test_step_times_minimized_lead_to_the_same_configs(
    problem: Problem, world: dict[str, float]
) -> None:
    tokens = problem.workload.tokens_per_step
    configs = []
    for direction in ("maximize", "minimize"):
        sampler = GuidedSampler(problem, seed=0)
        study = optuna.create_study(direction=direction, sampler=sampler)
        measure = _objective(problem, world, sampler.suggest)
        if direction == "minimize":
            study.optimize(lambda t, m=measure: tokens / m(t), n_trials=5)
        else:
            study.optimize(measure, n_trials=5)
        configs.append([t.params for t in study.trials])
    assert configs[0] == configs[1]


def test_its_stop_rule_ends_a_study_long_before_its_trial_budget(
    problem: Problem, world: dict[str, float]
) -> None:
    sampler = GuidedSampler(problem, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    measure = _objective(problem, world, sampler.suggest)
    study.optimize(measure, n_trials=200, callbacks=[sampler.stop_rule])
    assert len(study.trials) < 60
    assert _regret(study, world) < 0.03
    assert len({config_key(sampler.space.config(t.params, 8)) for t in study.trials}) == len(
        study.trials
    )  # no config proposed twice
