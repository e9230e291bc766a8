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
beats the best measured one by more than the threshold, or (thorough, `Effort.stop_risk`)
when the expected number of layouts that do is small: with hundreds of layouts each unlikely
to win, a bound on each lets the one that wins go.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from optuna.trial import FrozenTrial, TrialState
from scipy import special

from autotune.confidence import PROPOSAL_OPTIMISM_SIGMAS, STOP_RULE_SIGMAS
from autotune.estimate.calibrate import BOUNDS, Observation, fit, log_errors
from autotune.estimate.calibration import Calibration
from autotune.estimate.predict import Estimate, Predictor, estimate
from autotune.problem import Problem
from autotune.space import TrainConfig, nccl_default
from autotune.space.config import KNOBS
from autotune.space.table import ConfigTable
from autotune.study.noise import NOISE_FLOOR
from autotune.study.slice import observed_as
from autotune.study.trial_attrs import TrialAttrs

PRIOR_SPREAD = 0.15
"""The model's relative error before measurements say otherwise: about its error on
published runs held out by source (9-23%; 6.2% in sample, on the runs its defaults are fitted
to: results/bench/costmodel_validation.md); a new cluster may be worse."""
PRIOR_WEIGHT = 3
"""The prior counts as this many residuals when the spread is estimated from trials."""
MIN_SPREAD = 0.03
"""Floor on the model's error: measurements themselves are noisy by a few percent."""
DISTANCE_WEIGHT = 0.1
"""Extra uncertainty per knob a config differs by from its nearest measured config."""
NOVELTY_WEIGHT = 0.5
"""Extra uncertainty, in model spreads, for a config one knob from a measured one where that
knob takes a value no trial has run (a ZeRO stage, a micro-batch): the model's error for the
value is unknown, not merely one knob away. On CPU gloo the model ranks ZeRO 1-2 a little
above ZeRO 0 and measurement says the reverse; without this, the default search can spend its
trials without running ZeRO 0 (results/bench/default_run.md). Only one knob away: a bonus for
any untried value makes the search chase configs unlike any measured, which costs trials in
scripts/bench_search.py's worlds."""
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
"""Measured trials before every parameter is fitted; fewer fit compute efficiency only,
so that a handful of points cannot be explained away by a free parameter each."""


MOE_PARAMETERS = ("moe_expert_host_s", "ep_overlap")
"""Fitted only for a mixture of experts: nothing else measures them."""
FREE_PARAMETERS = tuple(name for name in BOUNDS if name not in MOE_PARAMETERS)


@dataclass(frozen=True)
class Scored:
    """The configs still open, as rows of the candidate table, with each one's optimistic
    log tokens/s (unsorted: a proposal needs only the best)."""

    rows: np.ndarray
    score: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def best(self) -> np.ndarray:
        """The rows scored within 1e-12 of the best, best first (equals in table order)."""
        near = np.flatnonzero(self.score >= self.score.max() - 1e-12)
        return self.rows[near[np.argsort(-self.score[near], kind="stable")]]


@dataclass
class GuidedSearch:
    problem: Problem
    candidates: Sequence[TrainConfig]
    """Valid configs predicted to fit, before any measurement."""
    calibration: Calibration
    seed: int | None = None
    threshold: float = NOISE_FLOOR
    stop_risk: float | None = None
    """`Effort.stop_risk`: stop once the expected number of open layouts that beat the best
    by the threshold is at most this (NCCL variants: none alone at `STOP_RULE_SIGMAS`); None:
    once no config alone could at `STOP_RULE_SIGMAS`."""
    rng: random.Random = field(init=False)
    memory_limit: float = field(init=False)
    measured: list[TrainConfig] = field(default_factory=list)
    residuals: list[float] = field(default_factory=list)
    """log(measured / predicted tokens/s) of each measured config, under the refitted model."""
    spread: float = PRIOR_SPREAD
    _table: ConfigTable = field(init=False, repr=False)
    _predictor: Predictor = field(init=False, repr=False)
    """The model of every candidate, computed once: a refit predicts them in a few array
    operations."""
    _beliefs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False
    )
    """What `_believe` says under the current fit, computed once per refit."""
    _memory_bytes: np.ndarray = field(init=False, repr=False)
    _codes: np.ndarray = field(init=False, repr=False)
    """Each candidate's knob values as small integers, one row per knob (knob-major, so a
    distance to a measured config is a pass over each knob's contiguous codes)."""
    _value_codes: dict[str, dict[object, int]] = field(init=False, repr=False)
    _weights: np.ndarray = field(init=False, repr=False)
    """Each knob's place value: a config's codes weighted by them are its number, by which
    keys are found among the candidates (`_numbers`, sorted, `_by_number` their rows)."""
    _numbers: np.ndarray = field(init=False, repr=False)
    _by_number: np.ndarray = field(init=False, repr=False)
    _layout_of: np.ndarray = field(init=False, repr=False)
    """Each candidate's layout (the number of the config with NCCL's own choices: the config
    NCCL knobs would refine); `_is_layout`: whether the candidate is its own layout."""
    _is_layout: np.ndarray = field(init=False, repr=False)
    _layouts: np.ndarray = field(init=False, repr=False)
    """The rows that are layouts, which `_layout_model` predicts at every refit (the full
    model predicts only the leader's NCCL variants); `_layout_codes`: their knob codes."""
    _layout_model: Predictor = field(init=False, repr=False)
    _layout_codes: np.ndarray = field(init=False, repr=False)
    _distances: dict[TrainConfig, np.ndarray] = field(default_factory=dict, init=False, repr=False)
    """Per measured config, how many knobs each layout differs from it by."""
    _learned_from: tuple[int, ...] | None = field(default=None, init=False, repr=False)
    """The trials the last fit used: a pass that lost a claim refits nothing."""
    leader_measured: tuple[TrainConfig, float] | None = None
    """The best measured config and its tokens/s, which NCCL variants are scored against."""

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.memory_limit = self.problem.cluster.device.memory_bytes
        p = self.problem
        self._table = table = ConfigTable.of(self.candidates)
        collectives = self.calibration.collectives
        self._predictor = Predictor.of(p.workload, table, p.cluster, p.engine.traits, collectives)
        self._memory_bytes = self._predictor.memory.total
        self._value_codes, columns = {}, []
        for name in KNOBS:
            values, codes = np.unique(getattr(table, name), return_inverse=True)
            self._value_codes[name] = {v: i for i, v in enumerate(values.tolist())}
            columns.append(codes.reshape(-1))
        self._codes = np.stack(columns).astype(np.int16)
        radix = [len(self._value_codes[name]) + 1 for name in KNOBS]  # + 1: a value unseen
        if math.prod(radix) >= 2**62:
            raise ValueError("too many knob values to number the configs of the space")
        self._weights = np.cumprod([1, *radix[:-1]]).astype(np.int64)
        numbers = self._weights @ self._codes.astype(np.int64)
        self._by_number = np.argsort(numbers, kind="stable")
        self._numbers = numbers[self._by_number]
        nccl = [list(KNOBS).index(name) for name in ("nccl_algo", "nccl_proto")]
        defaults = np.array([self._encode(TrainConfig())[i] for i in nccl])
        self._is_layout = (self._codes[nccl] == defaults[:, None]).all(axis=0)
        self._layout_of = numbers - self._weights[nccl] @ (self._codes[nccl] - defaults[:, None])
        self._layouts = np.flatnonzero(self._is_layout)
        everything = len(self._layouts) == len(table)
        self._layout_model = self._predictor if everything else self._predictor.take(self._layouts)
        self._layout_codes = self._codes if everything else self._codes[:, self._layouts]

    def _encode(self, config: TrainConfig) -> np.ndarray:
        """The config's knob codes; a value no candidate has gets the code past the last."""
        codes = self._value_codes
        return np.array(
            [codes[name].get(getattr(config, name), len(codes[name])) for name in KNOBS],
            dtype=np.int16,
        )

    def _row(self, key: str) -> int | None:
        """The candidate with this key, if any."""
        try:
            config = TrainConfig(**json.loads(key))
        except TypeError:  # a knob this version does not have: no candidate has it
            return None
        number = int(self._encode(config).astype(np.int64) @ self._weights)
        at = int(np.searchsorted(self._numbers, number))
        found = at < len(self._numbers) and self._numbers[at] == number
        return int(self._by_number[at]) if found else None

    # --- learning from the study ------------------------------------------------------
    def learn(self, trials: list[FrozenTrial]) -> None:
        """Refit the model to the measured trials; tighten memory after out-of-memory ones."""
        attrs = {t.number: TrialAttrs.of(t) for t in trials}
        step_times = {
            t.number: step
            for t in trials
            if t.state == TrialState.COMPLETE and (step := attrs[t.number].step_time_s)
        }
        learned_from = tuple(
            t.number for t in trials if t.number in step_times or attrs[t.number].kind == "oom"
        )
        if learned_from == self._learned_from:  # nothing new measured: the fit stands
            return
        self._learned_from = learned_from
        w, engine = self.problem.workload, self.problem.engine
        by_number = {t.number: t for t in trials}
        seen = [  # a slice trial is fitted as the slice it ran on
            (attrs[n].config, view, step)
            for n, step in step_times.items()
            if (view := observed_as(self.problem, by_number[n].user_attrs, attrs[n].config))
        ]
        data = [Observation(*view, engine.traits, step) for _, view, step in seen]
        self.measured = [config for config, _, _ in seen]
        self._beliefs = None
        fastest = max(
            (t for t in trials if t.state == TrialState.COMPLETE and t.value is not None),
            key=lambda t: t.value or 0.0,
            default=None,
        )
        self.leader_measured = (
            (attrs[fastest.number].config, fastest.value or 0.0)
            if fastest is not None and attrs[fastest.number].config_values is not None
            else None
        )
        every = FREE_PARAMETERS + (MOE_PARAMETERS if w.is_moe else ())
        free = every if len(data) >= FULL_FIT_AFTER else ("compute_efficiency",)
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
        for oom in (a for a in attrs.values() if a.kind == "oom"):
            if oom.config_values is not None:
                e = self._estimate(oom.config)
                self.memory_limit = min(self.memory_limit, e.memory.total * 0.999)

    # --- proposing ----------------------------------------------------------------------
    def ranked(self, excluded: set[str], optimism: float = PROPOSAL_OPTIMISM_SIGMAS) -> Scored:
        """Every config still open, scored: its optimistic log tokens/s and uncertainty."""
        rows, expected, unc = self._open(excluded)
        return Scored(rows, expected + optimism * unc)

    def _open(self, excluded: set[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The configs still open, each with its expected log tokens/s and uncertainty."""
        if self._beliefs is None:
            self._beliefs = self._believe()
        rows, expected, unc = self._beliefs
        measured = [row for row in map(self._row, excluded) if row is not None]
        open_ = ~np.isin(rows, measured)
        return rows[open_], expected[open_], unc[open_]

    def _believe(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Under the current fit, the candidates that may be proposed (they fit, and are a
        layout or a promising NCCL refinement of the leader's), in table order, with each
        one's expected log tokens/s and its uncertainty. Only those are predicted: the other
        NCCL variants, most of a space that lists NCCL settings, are never proposed."""
        p = self._layout_model.at(self.calibration)
        distances, anchors = self._nearest()
        # A layout: its prediction moved by its nearest measured config's residual.
        rows = [self._layouts]
        expected = [np.log(p.tokens_per_s) + anchors * RESIDUAL_KEPT**distances]
        untried = self._novel() & (distances == 1)
        unc = [self.spread * (1 + DISTANCE_WEIGHT * distances + NOVELTY_WEIGHT * untried)]
        # NCCL settings refine the measured leader: its measurement, moved by the model's
        # predicted change, plus what NCCL's choice may leave on the table. Kept only while
        # it could beat the leader by the threshold at the stop rule's confidence, so
        # proposing and stopping agree.
        refine = self._refinement_anchor()
        if refine is not None and self.leader_measured is not None:
            variants = ~self._is_layout & (self._layout_of == self._leader_layout())
            variant_rows = np.flatnonzero(variants)
            v = self._predictor.take(variant_rows).at(self.calibration)
            variant_unc = NCCL_SPREAD * v.step.exposed_comm_s / v.step.total_s
            variant_expected = refine + np.log(v.tokens_per_s)
            bar = math.log(self.leader_measured[1] * (1 + self.threshold))
            promising = variant_expected + STOP_RULE_SIGMAS * variant_unc > bar
            rows.append(variant_rows[promising])
            expected.append(variant_expected[promising])
            unc.append(variant_unc[promising])
        all_rows = np.concatenate(rows)
        in_order = np.argsort(all_rows, kind="stable")
        kept = in_order[self._memory_bytes[all_rows[in_order]] <= self.memory_limit]
        return all_rows[kept], np.concatenate(expected)[kept], np.concatenate(unc)[kept]

    def propose(self, excluded: set[str]) -> TrainConfig | None:
        scored = self.ranked(excluded)
        if not len(scored):
            return None
        ties = scored.best()
        # Among equals, the config closest to the defaults (e.g. leaving NCCL its own choice).
        configs = [self._table.config(i) for i in ties]
        simplest = min(len(c.differs_from_default()) for c in configs)
        return self.rng.choice([c for c in configs if len(c.differs_from_default()) == simplest])

    def converged(
        self, excluded: set[str], best_tokens_per_s: float | None, best_sd: float = 0.0
    ) -> str | None:
        """Why the search can stop, or None while some config may still win: against the
        best config's mean throughput, whose log is known to `best_sd`."""
        rows, expected, unc = self._open(excluded)
        if best_tokens_per_s is None or not len(rows):
            return None
        bar = math.log(best_tokens_per_s * (1 + self.threshold))
        unc = np.hypot(unc, best_sd)
        if self.stop_risk is None:
            if (expected + STOP_RULE_SIGMAS * unc).max() <= bar:
                return (
                    f"search converged: {len(rows)} configs left, none predicted to beat "
                    f"the best by more than {self.threshold:.0%}"
                )
            return None
        # The bound on them all is over layouts. NCCL variants keep the bound on each: their
        # uncertainty is a prior that no other variant's measurement shrinks, so a sum over
        # hundreds of them would measure every one (and the NCCL verdict asks 99% anyway).
        layouts = self._is_layout[rows]
        z = (expected[layouts] - bar) / np.maximum(unc[layouts], 1e-9)
        risk = float(special.ndtr(z).sum())
        if risk <= self.stop_risk and layouts.all():
            return (
                f"search converged: {len(rows)} configs left, {risk:.2f} of them expected "
                f"to beat the best by more than {self.threshold:.0%}"
            )
        return None

    def _leader_layout(self) -> int:
        """The layout of the best measured config, the only one NCCL algorithm and protocol
        trials refine (-1: none)."""
        if self.leader_measured is None:
            return -1
        codes = self._encode(nccl_default(self.leader_measured[0]))
        return int(codes.astype(np.int64) @ self._weights)

    def _refinement_anchor(self) -> float | None:
        """log(measured / predicted) tokens/s of the leader: added to a variant's predicted
        log throughput, it gives the variant's expected measurement."""
        if self.leader_measured is None or not self.leader_measured[1]:
            return None
        config, measured = self.leader_measured
        return math.log(measured / self._estimate(config).tokens_per_s)

    def _estimate(self, config: TrainConfig) -> Estimate:
        p = self.problem
        return estimate(p.workload, config, p.cluster, p.engine.traits, self.calibration)

    def _novel(self) -> np.ndarray:
        """Per layout: whether it has a knob value no measured config has had."""
        novel = np.zeros(len(self._layouts), dtype=bool)
        if not self.measured:
            return novel
        measured = np.stack([self._encode(c) for c in self.measured], axis=1)
        for codes, seen in zip(self._layout_codes, measured, strict=True):
            novel |= ~np.isin(codes, seen)
        return novel

    def _nearest(self) -> tuple[np.ndarray, np.ndarray]:
        """Per layout: how many knobs it differs by from its nearest measured config, and
        that config's residual (the mean over equally near ones; 0 before any measurement)."""
        n = len(self._layouts)
        if not self.measured:
            return np.zeros(n, dtype=np.int32), np.zeros(n)
        for config in self.measured:
            if config not in self._distances:
                differing = np.zeros(n, dtype=np.int8)
                for codes, value in zip(self._layout_codes, self._encode(config), strict=True):
                    differing += codes != value
                self._distances[config] = differing
        distances = [self._distances[c] for c in self.measured]
        nearest = np.minimum.reduce(distances)
        total, ties = np.zeros(n), np.zeros(n, dtype=np.int16)
        for differing, residual in zip(distances, self.residuals, strict=True):
            tied = differing == nearest
            np.add(total, residual, out=total, where=tied)
            ties += tied
        return nearest.astype(np.int32), total / ties
