"""The model-guided search: propose the config the recalibrated model most expects to win.

After every measurement the step-time model is refitted to the measured trials, every
unmeasured config that is predicted to fit is re-ranked, and the next proposal maximises an
optimistic score: log predicted tokens/s plus the model's uncertainty for that config. The
uncertainty is the spread of the model's errors on the trials so far (a prior before there
are enough), growing with the config's distance from anything measured. Out-of-memory
trials tighten the memory model: nothing predicted to need as much as a config that ran out
of memory is proposed again. The search has converged when no config's optimistic throughput
beats the best measured one by more than the threshold.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from optuna.trial import FrozenTrial, TrialState

from autotune.estimate.calibrate import BOUNDS, Observation, fit, log_errors
from autotune.estimate.predict import Estimate, estimate
from autotune.estimate.steptime import Calibration
from autotune.problem import Problem
from autotune.space import TrainConfig
from autotune.study.choices import config_key

PRIOR_SPREAD = 0.15
"""The model's relative error before measurements say otherwise (its held-out error on
published runs is 6-9%; a new cluster may be worse)."""
PRIOR_WEIGHT = 3
"""The prior counts as this many residuals when the spread is estimated from trials."""
MIN_SPREAD = 0.03
"""Floor on the model's error: measurements themselves are noisy by a few percent."""
DISTANCE_WEIGHT = 0.1
"""Extra uncertainty per knob a config differs by from its nearest measured config."""
EXPLORE = 1.0
"""Standard deviations of optimism when proposing (about an 84% one-sided bound)."""
CONFIDENCE = 2.0
"""Standard deviations the stop rule demands (about 98% one-sided): stopping is for good."""
FULL_FIT_AFTER = 8
"""Measured trials before all four parameters are fitted; fewer fit compute efficiency only,
so that a handful of points cannot be explained away by a free parameter each."""


FREE_PARAMETERS = tuple(BOUNDS)


@dataclass
class GuidedSearch:
    problem: Problem
    candidates: list[TrainConfig]
    """Valid configs predicted to fit, before any measurement."""
    calibration: Calibration
    seed: int | None = None
    threshold: float = 0.02
    rng: random.Random = field(init=False)
    memory_limit: float = field(init=False)
    measured: list[TrainConfig] = field(default_factory=list)
    spread: float = PRIOR_SPREAD

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.memory_limit = self.problem.cluster.device.memory_bytes

    # --- learning from the study ------------------------------------------------------
    def learn(self, trials: list[FrozenTrial]) -> None:
        """Refit the model to the measured trials; tighten memory after out-of-memory ones."""
        w, cluster, engine = self.problem.workload, self.problem.cluster, self.problem.engine
        data = [
            Observation(
                w,
                cluster,
                TrainConfig(**t.user_attrs["config"]),
                engine.name,
                t.user_attrs["step_time_s"],
            )
            for t in trials
            if t.state == TrialState.COMPLETE and t.user_attrs.get("step_time_s")
        ]
        self.measured = [o.config for o in data]
        free = FREE_PARAMETERS if len(data) >= FULL_FIT_AFTER else ("compute_efficiency",)
        if data:
            self.calibration = fit(data, self.calibration, free=free, rounds=3)
        # Residuals after fitting understate the error by the parameters fitted; the prior
        # keeps a few trials from making the model look exact.
        squares = sum(e * e for e in log_errors(self.calibration, data))
        dof = max(0, len(data) - len(free))
        self.spread = max(
            MIN_SPREAD,
            math.sqrt((PRIOR_WEIGHT * PRIOR_SPREAD**2 + squares) / (PRIOR_WEIGHT + dof)),
        )
        for t in trials:
            if t.user_attrs.get("kind") == "oom" and "config" in t.user_attrs:
                e = self._estimate(TrainConfig(**t.user_attrs["config"]))
                self.memory_limit = min(self.memory_limit, e.memory.total * 0.999)

    # --- proposing ----------------------------------------------------------------------
    def ranked(
        self, excluded: set[str], optimism: float = EXPLORE
    ) -> list[tuple[float, Estimate, float]]:
        """(optimistic log tokens/s, estimate, uncertainty) for every config still open."""
        scored = []
        for config in self.candidates:
            if config_key(config) in excluded:
                continue
            e = self._estimate(config)
            if e.memory.total > self.memory_limit:
                continue
            unc = self.spread * (1 + DISTANCE_WEIGHT * self._distance(config))
            scored.append((math.log(e.tokens_per_s) + optimism * unc, e, unc))
        scored.sort(key=lambda s: -s[0])
        return scored

    def propose(self, excluded: set[str]) -> TrainConfig | None:
        scored = self.ranked(excluded)
        if not scored:
            return None
        top = scored[0][0]
        ties = [s[1].config for s in scored if s[0] >= top - 1e-12]
        # Among equals, the config closest to the defaults (e.g. leaving NCCL its own choice).
        simplest = min(len(c.differs_from_default()) for c in ties)
        return self.rng.choice([c for c in ties if len(c.differs_from_default()) == simplest])

    def converged(self, excluded: set[str], best_tokens_per_s: float | None) -> str | None:
        """Why the search can stop, or None while some config may still win."""
        scored = self.ranked(excluded, optimism=CONFIDENCE)
        if best_tokens_per_s is None or not scored:
            return None
        bar = math.log(best_tokens_per_s * (1 + self.threshold))
        if scored[0][0] <= bar:
            return (
                f"search converged: {len(scored)} configs left, none predicted to beat "
                f"the best by more than {self.threshold:.0%}"
            )
        return None

    def _estimate(self, config: TrainConfig) -> Estimate:
        p = self.problem
        return estimate(p.workload, config, p.cluster, p.engine.name, self.calibration)

    def _distance(self, config: TrainConfig) -> int:
        if not self.measured:
            return 0
        mine = config.as_dict()
        return min(sum(1 for k, v in m.as_dict().items() if mine[k] != v) for m in self.measured)
