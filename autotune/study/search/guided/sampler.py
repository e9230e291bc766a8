"""autotune's guided search as an Optuna sampler, for a study of the user's own.

The model of an autotune problem (its workload, cluster and engine) is the prior: before any
trial the sampler proposes the config the model expects the most of; each finished trial's
value refits the model's calibration and its errors per layout and class (`GuidedSearch`),
and the next proposal is what the refit expects the most of, untried. The objective
returns tokens/s where the study maximizes, seconds per step where it minimizes. A
parameter outside autotune's space, or a trial once the guided search has nothing left to
propose, is sampled at random (with the same seed).

    problem = load_problem("megatron", "llama3-8b", "dgx-h100:4")
    sampler = GuidedSampler(problem, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(lambda t: measure(sampler.suggest(t)), n_trials=12,
                   callbacks=[sampler.stop_rule])
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from autotune.estimate.calibration import Calibration, default_calibration
from autotune.estimate.ranking import memory_verdicts
from autotune.problem import Problem
from autotune.space import TrainConfig, config_key
from autotune.study.choices import StudySpace
from autotune.study.record.trial_attrs import CONFIG, SOURCE
from autotune.study.search.guided.search import GuidedSearch

FINISHED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED, TrialState.RUNNING)


class GuidedSampler(BaseSampler):
    """Proposes each trial's config from autotune's model of `problem`, refitted to the
    study's trials (see the module's docstring)."""

    def __init__(
        self, problem: Problem, *, calibration: Calibration | None = None, seed: int | None = None
    ) -> None:
        valid = problem.enumerate().require_some().valid
        cal = calibration or default_calibration(
            problem.cluster.device.generation, problem.engine.traits
        )
        ranked = memory_verdicts(
            problem.workload, problem.cluster, problem.engine.traits, valid, cal
        )
        self.problem = problem
        self.space = StudySpace.from_valid(valid)
        self._guide = GuidedSearch(problem, ranked.fastest_first, cal, seed)
        self._random = RandomSampler(seed=seed)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        """The knobs that vary among the problem's valid configs, as Optuna parameters."""
        return self.space.distributions

    def suggest(self, trial: optuna.Trial) -> TrainConfig:
        """Every knob of the space suggested on `trial`; the config they make."""
        params = {
            name: trial.suggest_categorical(name, choices)
            for name, choices in self.space.choices.items()
        }
        return self.space.config(params, self.problem.cluster.world_size)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self.distributions)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        self._guide.learn(self._as_measured(study))
        config = self._guide.propose(self._tried(study, trial))
        return self.space.params(config) if config is not None else {}

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    def stop_rule(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """An Optuna callback: stop the study once no untried config is expected to beat the
        best by more than the noise floor (the guided search's own stop rule)."""
        measured = self._as_measured(study)
        if not measured:
            return
        self._guide.learn(measured)
        best = max(t.value or 0.0 for t in measured)
        if self._guide.converged(self._tried(study, None), best) is not None:
            study.stop()

    def _as_measured(self, study: optuna.Study) -> list[FrozenTrial]:
        """The study's completed trials of autotune's space as the guided search reads a
        measured trial: its config, step time and tokens/s."""
        tokens = self.problem.workload.tokens_per_step
        maximize = study.direction == StudyDirection.MAXIMIZE
        seen = []
        for t in self._of_space(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))):
            if t.value is None or t.value <= 0:
                continue
            step = tokens / t.value if maximize else t.value
            measured = copy.copy(t)
            measured.value = tokens / step
            config = self.space.config(t.params, self.problem.cluster.world_size)
            measured.user_attrs = {
                CONFIG: config.as_dict(),
                "step_time_s": step,
                SOURCE: "measured",
            }
            seen.append(measured)
        return seen

    def _tried(self, study: optuna.Study, current: FrozenTrial | None) -> set[str]:
        """The configs of every other trial that ran, runs or failed: none is proposed again."""
        others = [
            t
            for t in study.get_trials(deepcopy=False, states=FINISHED)
            if current is None or t.number != current.number
        ]
        world = self.problem.cluster.world_size
        return {config_key(self.space.config(t.params, world)) for t in self._of_space(others)}

    def _of_space(self, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
        names = set(self.distributions)
        return [t for t in trials if names <= set(t.params)]
