"""The model-guided search: propose the config the recalibrated model most expects to win.

After every measurement the step-time model is refitted to the measured trials, every
unmeasured config that is predicted to fit is re-ranked, and the next proposal maximises an
optimistic score: log predicted tokens/s, moved by part of what the model got wrong on the
nearest measured config (its residual, halved for each knob the two differ by: a real system
strays from the model alike for configs that differ in few knobs, so the search looks around
the configs that measured better than predicted), plus the model's uncertainty for that
config. The
uncertainty is the spread of the model's errors on the trials so far (a prior before there
are enough), growing with the config's distance from anything measured. Out-of-memory
trials tighten the memory model: nothing predicted to need as much as a config that ran out
of memory is proposed again. The search has converged when no config's optimistic throughput
beats the best measured one by more than the threshold.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from autotune.estimate.calibrate import BOUNDS, Observation, fit, log_errors
from autotune.estimate.memory import MemoryBreakdown
from autotune.estimate.predict import Estimate, Predictions, estimate, predict
from autotune.estimate.steptime import Calibration
from autotune.problem import Problem
from autotune.space import TrainConfig, config_key, nccl_default
from autotune.space.table import ConfigTable
from autotune.study.noise import NOISE_FLOOR
from autotune.study.trial_attrs import CONFIG, KIND

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
NCCL_SPREAD = 0.3
"""How far NCCL's own choice may be from the best forced setting, as a share of the exposed
collective time: forcing an algorithm or protocol moves busbw by tens of percent at some
sizes, and NCCL settings change nothing else. A variant's uncertainty is this times its
communication share, so compute-bound layouts get no NCCL trials."""
RESIDUAL_KEPT = 0.5
"""Share of a measured config's residual that carries to a config one knob away (squared for
two knobs, ...): the correlation of the model's errors between neighbours, as a Gaussian
process with a product kernel would have it."""
FULL_FIT_AFTER = 8
"""Measured trials before all four parameters are fitted; fewer fit compute efficiency only,
so that a handful of points cannot be explained away by a free parameter each."""


FREE_PARAMETERS = tuple(BOUNDS)


@dataclass(frozen=True)
class Scored:
    """The configs still open, best score first: rows of the candidate table, each one's
    optimistic log tokens/s and uncertainty."""

    rows: np.ndarray
    score: np.ndarray
    uncertainty: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class GuidedSearch:
    problem: Problem
    candidates: Sequence[TrainConfig]
    """Valid configs predicted to fit, before any measurement."""
    calibration: Calibration
    seed: int | None = None
    threshold: float = NOISE_FLOOR
    rng: random.Random = field(init=False)
    memory_limit: float = field(init=False)
    measured: list[TrainConfig] = field(default_factory=list)
    residuals: list[float] = field(default_factory=list)
    """log(measured / predicted tokens/s) of each measured config, under the refitted model."""
    spread: float = PRIOR_SPREAD
    _table: ConfigTable = field(init=False, repr=False)
    _index: dict[str, int] = field(init=False, repr=False)
    """Each candidate's row by its key."""
    _codes: np.ndarray = field(init=False, repr=False)
    """Each candidate's knob values as small integers, one column per knob: distances to
    the measured configs for a hundred thousand candidates are one array comparison."""
    _predictions: Predictions | None = field(default=None, init=False, repr=False)
    """Predictions for the current calibration, made once per refit."""
    _memory: MemoryBreakdown[np.ndarray] = field(init=False, repr=False)
    """Each candidate's predicted memory, which no fit changes."""
    _layouts: dict[str, int] = field(init=False, repr=False)
    _layout_of: np.ndarray = field(init=False, repr=False)
    """Each candidate's layout (its key with NCCL's own choices: the config NCCL knobs would
    refine), as a number; `_is_layout`: whether the candidate is its own layout."""
    _is_layout: np.ndarray = field(init=False, repr=False)
    _learned_from: tuple[int, ...] | None = field(default=None, init=False, repr=False)
    """The trials the last fit used: a pass that lost a claim refits nothing."""
    leader_measured: tuple[TrainConfig, float] | None = None
    """The best measured config and its tokens/s, which NCCL variants are scored against."""

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.memory_limit = self.problem.cluster.device.memory_bytes
        self._table = ConfigTable.of(self.candidates)
        keys = [config_key(c) for c in self.candidates]
        self._index = {key: i for i, key in enumerate(keys)}
        self._layouts = {}
        layouts = [config_key(nccl_default(c)) for c in self.candidates]
        self._layout_of = np.array(
            [self._layouts.setdefault(k, len(self._layouts)) for k in layouts]
        )
        self._is_layout = np.array([k == layout for k, layout in zip(keys, layouts, strict=True)])
        p = self.problem
        first = predict(p.workload, self._table, p.cluster, p.engine.name, self.calibration)
        self._memory, self._predictions = first.memory, first
        names = [f.name for f in dataclasses.fields(TrainConfig)]
        self._value_codes: list[dict[object, int]] = [{} for _ in names]
        self._codes = np.array([self._encode(c) for c in self.candidates], dtype=np.int32).reshape(
            len(self.candidates), len(names)
        )

    def _encode(self, config: TrainConfig) -> list[int]:
        return [
            codes.setdefault(getattr(config, f.name), len(codes))
            for codes, f in zip(self._value_codes, dataclasses.fields(TrainConfig), strict=True)
        ]

    # --- learning from the study ------------------------------------------------------
    def learn(self, trials: list[FrozenTrial]) -> None:
        """Refit the model to the measured trials; tighten memory after out-of-memory ones."""
        learned_from = tuple(
            t.number
            for t in trials
            if (t.state == TrialState.COMPLETE and t.user_attrs.get("step_time_s"))
            or t.user_attrs.get(KIND) == "oom"
        )
        if learned_from == self._learned_from:  # nothing new measured: the fit stands
            return
        self._learned_from = learned_from
        w, cluster, engine = self.problem.workload, self.problem.cluster, self.problem.engine
        data = [
            Observation(
                w,
                cluster,
                TrainConfig(**t.user_attrs[CONFIG]),
                engine.name,
                t.user_attrs["step_time_s"],
            )
            for t in trials
            if t.state == TrialState.COMPLETE and t.user_attrs.get("step_time_s")
        ]
        self.measured = [o.config for o in data]
        self._predictions = None
        fastest = max(
            (t for t in trials if t.state == TrialState.COMPLETE and t.value is not None),
            key=lambda t: t.value or 0.0,
            default=None,
        )
        self.leader_measured = (
            (TrainConfig(**fastest.user_attrs[CONFIG]), fastest.value or 0.0)
            if fastest is not None and CONFIG in fastest.user_attrs
            else None
        )
        free = FREE_PARAMETERS if len(data) >= FULL_FIT_AFTER else ("compute_efficiency",)
        if data:
            self.calibration = fit(data, self.calibration, free=free, rounds=3)
        # Residuals after fitting understate the error by the parameters fitted; the prior
        # keeps a few trials from making the model look exact.
        errors = log_errors(self.calibration, data)
        self.residuals = errors  # log(predicted / measured step time)
        squares = sum(e * e for e in errors)
        dof = max(0, len(data) - len(free))
        self.spread = max(
            MIN_SPREAD,
            math.sqrt((PRIOR_WEIGHT * PRIOR_SPREAD**2 + squares) / (PRIOR_WEIGHT + dof)),
        )
        for t in trials:
            if t.user_attrs.get(KIND) == "oom" and CONFIG in t.user_attrs:
                e = self._estimate(TrainConfig(**t.user_attrs[CONFIG]))
                self.memory_limit = min(self.memory_limit, e.memory.total * 0.999)

    # --- proposing ----------------------------------------------------------------------
    def ranked(self, excluded: set[str], optimism: float = EXPLORE) -> Scored:
        """Every config still open, scored: its optimistic log tokens/s and uncertainty."""
        if self._predictions is None:
            self._predictions = self._predict()
        p = self._predictions
        distances, anchors = self._nearest()
        log_rate = np.log(p.tokens_per_s)
        # A layout: its prediction moved by its nearest measured config's residual.
        layout_unc = self.spread * (1 + DISTANCE_WEIGHT * distances)
        layout_expected = log_rate + anchors * RESIDUAL_KEPT**distances
        # NCCL settings refine the measured leader: its measurement, moved by the model's
        # predicted change, plus what NCCL's choice may leave on the table. Kept only while
        # it could beat the leader by the threshold at the stop rule's confidence, so
        # proposing and stopping agree.
        refine = self._refinement_anchor()
        variant_unc = NCCL_SPREAD * p.step.exposed_comm_s / p.step.total_s
        variant_expected = (refine or 0.0) + log_rate
        variant = ~self._is_layout & (self._layout_of == self._leader_layout())
        if refine is not None:
            bar = math.log(self.leader_measured[1] * (1 + self.threshold))  # type: ignore[index]
            variant &= variant_expected + CONFIDENCE * variant_unc > bar
        else:
            variant[:] = False
        unc = np.where(self._is_layout, layout_unc, variant_unc)
        expected = np.where(self._is_layout, layout_expected, variant_expected)
        open_ = (self._is_layout | variant) & (self._memory.total <= self.memory_limit)
        gone = [self._index[k] for k in excluded if k in self._index]
        open_[gone] = False
        rows = np.flatnonzero(open_)
        score = expected[rows] + optimism * unc[rows]
        order = np.argsort(-score, kind="stable")
        return Scored(rows[order], score[order], unc[rows][order])

    def propose(self, excluded: set[str]) -> TrainConfig | None:
        scored = self.ranked(excluded)
        if not len(scored):
            return None
        ties = scored.rows[scored.score >= scored.score[0] - 1e-12]
        # Among equals, the config closest to the defaults (e.g. leaving NCCL its own choice).
        configs = [self.candidates[i] for i in ties]
        simplest = min(len(c.differs_from_default()) for c in configs)
        return self.rng.choice([c for c in configs if len(c.differs_from_default()) == simplest])

    def converged(self, excluded: set[str], best_tokens_per_s: float | None) -> str | None:
        """Why the search can stop, or None while some config may still win."""
        scored = self.ranked(excluded, optimism=CONFIDENCE)
        if best_tokens_per_s is None or not len(scored):
            return None
        bar = math.log(best_tokens_per_s * (1 + self.threshold))
        if scored.score[0] <= bar:
            return (
                f"search converged: {len(scored)} configs left, none predicted to beat "
                f"the best by more than {self.threshold:.0%}"
            )
        return None

    def _leader_layout(self) -> int:
        """The layout of the best measured config, the only one NCCL algorithm and protocol
        trials refine (-1: none)."""
        if self.leader_measured is None:
            return -1
        return self._layouts.get(config_key(nccl_default(self.leader_measured[0])), -1)

    def _refinement_anchor(self) -> float | None:
        """log(measured / predicted) tokens/s of the leader: added to a variant's predicted
        log throughput, it gives the variant's expected measurement."""
        if self.leader_measured is None or not self.leader_measured[1]:
            return None
        config, measured = self.leader_measured
        return math.log(measured / self._estimate(config).tokens_per_s)

    def _predict(self) -> Predictions:
        p = self.problem
        cal = self.calibration
        return predict(p.workload, self._table, p.cluster, p.engine.name, cal, self._memory)

    def _estimate(self, config: TrainConfig) -> Estimate:
        p = self.problem
        return estimate(p.workload, config, p.cluster, p.engine.name, self.calibration)

    def _nearest(self) -> tuple[np.ndarray, np.ndarray]:
        """Per candidate: how many knobs it differs by from its nearest measured config, and
        that config's residual (the mean over equally near ones; 0 before any measurement)."""
        n = len(self.candidates)
        if not self.measured:
            return np.zeros(n, dtype=np.int32), np.zeros(n)
        differing = np.stack(
            [
                (self._codes != np.array(self._encode(c), dtype=np.int32)).sum(1)
                for c in self.measured
            ]
        )
        nearest = differing.min(0)
        ties = differing == nearest
        residuals = np.array(self.residuals)[:, None]
        return nearest, (ties * residuals).sum(0) / ties.sum(0)
