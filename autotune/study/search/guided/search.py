"""The model-guided search: propose the config the recalibrated model most expects to win.

After every measurement (from `FULL_FIT_AFTER` trials on) the step-time model is refitted
to the measured trials, and what it still gets wrong is learned (`model_errors`: the model's
level, each knob value's class-wide error, each parallel layout's, each layout's own, shared
with its neighbours). Every unmeasured config predicted to fit is scored optimistically: log
predicted tokens/s, moved by its expected error, plus `PROPOSAL_OPTIMISM_SIGMAS` times that
error's spread, so a value never measured stays worth a trial while the model's margin
against it is within its error. Configs within `TIE` are equals (the simplest of them, then
the seed, chooses); the first trial is the seed's among those within `NEAR_TIE`. NCCL
settings and bucket sizes (`_config_codes.REFINING`) refine the measured leader once no
layout left could beat it by the threshold at the stop rule's confidence. Nothing
predicted to need as much memory as a config that ran out of it is proposed again. The search
has converged when no config's optimistic throughput beats the best measured one by the
threshold, or (thorough, `Effort.stop_risk`) when the expected number of layouts that do is
small.
"""

from __future__ import annotations

import math
import random
import statistics
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
from autotune.space import TrainConfig
from autotune.space.config import KNOBS
from autotune.space.table import ConfigTable
from autotune.study.record.trial_attrs import GUESSED, RANKED_BY, TrialAttrs
from autotune.study.search._config_codes import Codes, Scored
from autotune.study.search._model_errors import (
    LEVEL_SPREAD,
    PARALLEL,
    PARALLEL_SPREAD,
    STRUCTURAL,
    WIDE,
    Beliefs,
    Shared,
    believe,
    measured_between,
    value_spread,
    value_variances,
    widened,
)
from autotune.study.slice.scale import leader_under_miss
from autotune.study.slice.trials import observed_as
from autotune.study.verdict.noise import NOISE_FLOOR
from autotune.study.verdict.parity import DIFFERS

TIE = 0.002
"""Scores closer than this (log throughput: 0.2%, far below a trial's noise) are equals."""
NEAR_TIE = 0.01
"""Before anything is measured, configs scored closer than this (1%, far below a layout's own
error) are near-equals the seed chooses the first trial among: two seeds, two opinions."""
NCCL_SPREAD = 0.3
"""How far NCCL's own choice may be from the best forced setting, as a share of the exposed
collective time (forcing an algorithm or protocol moves busbw by tens of percent at some
sizes): a variant's uncertainty is this times its communication share."""
FULL_FIT_AFTER = 8
"""Measured trials before the model's parameters are refitted. Until then the errors model's
level (`_model_errors.LEVEL_SPREAD`) takes up the model's overall error, so that a few slow
configs of one class are not explained away as a slower machine."""
LEVEL_OFF = 3 * LEVEL_SPREAD
"""Before `FULL_FIT_AFTER`, a mean error beyond this is the machine, not a class (a CPU
against a GPU model): compute efficiency alone is refitted."""

MOE_PARAMETERS = ("moe_expert_host_s", "ep_overlap")
"""Fitted only for a mixture of experts: nothing else measures them."""
FREE_PARAMETERS = tuple(name for name in BOUNDS if name not in MOE_PARAMETERS)


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
    scale_slope: float = 0.0
    """In a slice study, how far each candidate's full-size prediction is taken down per unit
    of its data-parallel traffic share: what the scale probes learnt the model misses as the
    nodes grow (`slice.scale.ScaleFit.traffic`); 0 elsewhere."""
    _table: ConfigTable = field(init=False, repr=False)
    _predictor: Predictor = field(init=False, repr=False)
    """The model of every candidate, computed once: a refit predicts them in a few array
    operations."""
    _beliefs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False
    )
    """What `_believe` says under the current fit, computed once per refit."""
    _memory_bytes: np.ndarray = field(init=False, repr=False)
    _coded: Codes = field(init=False, repr=False)
    """The candidates' knob values as codes, their numbers and layouts."""
    _layout_of: np.ndarray = field(init=False, repr=False)
    """Each candidate's layout (the number of the config with the `REFINING` knobs at their
    defaults: what NCCL settings and bucket sizes would refine); `_is_layout`: whether the
    candidate stands for its layout (`Codes.plainest`)."""
    _is_layout: np.ndarray = field(init=False, repr=False)
    _layouts: np.ndarray = field(init=False, repr=False)
    """The rows that are layouts, which `_layout_model` predicts at every refit (the full
    model predicts only the leader's NCCL variants); `_layout_codes`: their knob codes."""
    _layout_model: Predictor = field(init=False, repr=False)
    _layout_codes: np.ndarray = field(init=False, repr=False)
    _same: dict[TrainConfig, tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False
    )
    """Per measured config, which of its move knobs' values each layout shares, and the
    moves between them."""
    _parallel_weights: np.ndarray = field(init=False, repr=False)
    """Place values of the `PARALLEL` knobs' codes: a config's parallel layout as a number."""
    _layout_parallel: np.ndarray = field(init=False, repr=False)
    """Each layout's parallel layout number."""
    _move_knobs: np.ndarray = field(init=False, repr=False)
    """The knobs whose change is a move: those that vary among the layouts, less `dp`,
    which follows from the others (changing TP with DP following is one move)."""
    _allowed: np.ndarray | None = field(default=None, init=False, repr=False)
    """Per candidate, whether it keeps the training (`restrict`); None: all do."""
    _learned_from: tuple[int, ...] | None = field(default=None, init=False, repr=False)
    """The trials the last fit used: a pass that lost a claim refits nothing."""
    _completed: list[tuple[TrainConfig, float, bool]] = field(init=False, repr=False)
    """Each completed trial's config, tokens/s, and whether that is a slice study's guess at
    full size (extrapolated from the slice, or the model's) rather than measured there."""
    leader_measured: tuple[TrainConfig, float] | None = field(default=None, init=False)
    """The best measured config and its tokens/s, which NCCL variants are scored against;
    in a slice study past its probes, each extrapolation taken down by the scale miss
    (`scale_slope` times its traffic share), as the full-size predictions are."""

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._completed = []
        self.memory_limit = self.problem.cluster.device.memory_bytes
        p = self.problem
        self._table = table = ConfigTable.of(self.candidates)
        collectives = self.calibration.collectives
        self._predictor = Predictor.of(p.workload, table, p.cluster, p.engine.traits, collectives)
        self._memory_bytes = self._predictor.memory.total
        self._coded = coded = Codes.of(table)
        self._layout_of = coded.layout_of(coded.codes)
        self._is_layout = coded.plainest(self._layout_of)
        self._layouts = np.flatnonzero(self._is_layout)
        everything = len(self._layouts) == len(table)
        self._layout_model = self._predictor if everything else self._predictor.take(self._layouts)
        self._layout_codes = coded.codes if everything else coded.codes[:, self._layouts]
        self._parallel_weights = np.where(np.isin(list(KNOBS), PARALLEL), coded.weights, 0)
        self._layout_parallel = self._parallel_weights @ self._layout_codes.astype(np.int64)
        self._move_knobs = np.array(
            [
                i
                for i, name in enumerate(KNOBS)
                if name != "dp" and len(np.unique(self._layout_codes[i])) > 1
            ],
            dtype=np.int64,
        )

    # --- learning from the study ------------------------------------------------------
    def learn(self, trials: list[FrozenTrial]) -> None:
        """Refit the model to the measured trials (those that train another model than the
        user's too: their speed was measured); tighten memory after out-of-memory ones. A
        slice study's scale probes are left out: what they tell is `scale_slope`."""
        trials = [t for t in trials if TrialAttrs.of(t).scale_probe_of is None]
        attrs = {t.number: TrialAttrs.of(t) for t in trials}
        step_times = {
            t.number: step
            for t in trials
            if (t.state == TrialState.COMPLETE or attrs[t.number].kind == DIFFERS)
            and (step := attrs[t.number].step_time_s)
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
        self._completed = [
            (attrs[t.number].config, t.value, t.user_attrs.get(RANKED_BY) in GUESSED)
            for t in trials
            if t.state == TrialState.COMPLETE
            and t.value is not None
            and attrs[t.number].config_values is not None
        ]
        every = FREE_PARAMETERS + (MOE_PARAMETERS if w.is_moe else ())
        if len(data) >= FULL_FIT_AFTER:
            self.calibration = fit(data, self.calibration, free=every, rounds=3)
        elif data and abs(statistics.fmean(log_errors(self.calibration, data))) > LEVEL_OFF:
            self.calibration = fit(data, self.calibration, free=("compute_efficiency",))
        self.residuals = log_errors(self.calibration, data)
        for oom in (a for a in attrs.values() if a.kind == "oom"):
            if oom.config_values is not None:
                e = self._estimate(oom.config)
                self.memory_limit = min(self.memory_limit, e.memory.total * 0.999)
        self.leader_measured = leader_under_miss(
            self.problem, self._completed, self.scale_slope, self.calibration
        )

    def restrict(self, allowed: np.ndarray | None) -> None:
        """Propose only the candidates `allowed` marks (`parity_cause.allowed_rows`: what
        loss parity and repeated failures taught); None: any."""
        self._allowed = allowed

    def rescale(self, slope: float) -> None:
        """Take full-size predictions down by `slope` times their data-parallel traffic share
        from now on (`scale_slope`)."""
        self.scale_slope = slope
        self._beliefs = None
        p, cal = self.problem, self.calibration
        self.leader_measured = leader_under_miss(p, self._completed, slope, cal)

    # --- proposing ----------------------------------------------------------------------
    def ranked(self, excluded: set[str], optimism: float = PROPOSAL_OPTIMISM_SIGMAS) -> Scored:
        """Every config still open, scored by its optimistic log tokens/s; NCCL and bucket
        variants only once the layout has settled: no open layout could beat the leader by
        the threshold at the stop rule's confidence."""
        rows, expected, unc = self.open_configs(excluded)
        layouts = self._is_layout[rows]
        if not layouts.all() and self.leader_measured is not None and layouts.any():
            bar = math.log(self.leader_measured[1] * (1 + self.threshold))
            bound = expected[layouts] + STOP_RULE_SIGMAS * unc[layouts]
            if bound.max() > bar:
                rows, expected, unc = rows[layouts], expected[layouts], unc[layouts]
        return Scored(rows, expected + optimism * unc)

    def open_configs(self, excluded: set[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The configs still open, each with its expected log tokens/s and uncertainty."""
        if self._beliefs is None:
            self._beliefs = self._believe()
        rows, expected, unc = self._beliefs
        measured = [row for row in map(self._coded.row, excluded) if row is not None]
        open_ = ~np.isin(rows, measured)
        if self._allowed is not None:
            open_ &= self._allowed[rows]
        return rows[open_], expected[open_], unc[open_]

    def _believe(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Under the current fit, the candidates that may be proposed (they fit, and are a
        layout or a promising NCCL refinement of the leader's), in table order, with each
        one's expected log tokens/s and its uncertainty. Only those are predicted: the other
        NCCL variants, most of a space that lists NCCL settings, are never proposed."""
        p = self._layout_model.at(self.calibration)
        # A layout: its prediction moved by the error the model is expected to make on it.
        errors = self._errors()
        rows = [self._layouts]
        expected = [np.log(p.tokens_per_s) + errors.mean]
        if self.scale_slope:  # a slice study's scale miss, once its probes have run
            expected[0] = expected[0] - self.scale_slope * p.step.dp_comm_s / p.step.total_s
        unc = [errors.spread]
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
        ties = scored.best(TIE)
        # Among equals, the configs closest to the defaults (e.g. leaving NCCL its own
        # choice); the seed chooses among them, and the first among near-equal layouts.
        if not self.measured and len(near := scored.best(NEAR_TIE)) > 1:
            ties = near
        configs = [self._table.config(i) for i in ties]
        simplest = min(len(c.differs_from_default()) for c in configs)
        return self.rng.choice([c for c in configs if len(c.differs_from_default()) == simplest])

    def converged(
        self, excluded: set[str], best_tokens_per_s: float | None, best_sd: float = 0.0
    ) -> str | None:
        """Why the search can stop, or None while some config may still win: against the
        best config's mean throughput, whose log is known to `best_sd`."""
        rows, expected, unc = self.open_configs(excluded)
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
        return int(self._coded.layout_of(self._coded.encode(self.leader_measured[0])[:, None])[0])

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

    def _errors(self) -> Beliefs:
        """Per layout, the model's expected error and its spread (`model_errors`)."""
        knobs = self._move_knobs
        names = [list(KNOBS)[i] for i in knobs]
        variances = np.array([value_spread(name) ** 2 for name in names])
        parallel = np.array([self._parallel_number(c) for c in self.measured], np.int64)
        n = len(self.measured)
        codes = np.array([self._coded.encode(c)[knobs] for c in self.measured]).reshape(
            n, len(knobs)
        )
        split = PARALLEL_SPREAD**2 * (parallel[:, None] == parallel[None, :])
        errors = np.array(self.residuals, dtype=np.float64)
        wide = widened(codes, variances, np.isin(names, list(STRUCTURAL)), split, errors)
        own_values = value_variances(codes, variances, wide)
        layouts = self._layout_codes[knobs]
        to_measured = Shared(
            np.zeros((len(self._layouts), n)), np.zeros((len(self._layouts), n), np.int64)
        )
        for j, (config, number) in enumerate(zip(self.measured, parallel, strict=True)):
            if config not in self._same:
                same = layouts == codes[j][:, None]
                self._same[config] = same, (~same).sum(axis=0)
            same, moves = self._same[config]
            to_measured.values[:, j] = own_values[j] @ same
            to_measured.values[:, j] += PARALLEL_SPREAD**2 * (self._layout_parallel == number)
            to_measured.moves[:, j] = moves
        between = measured_between(codes, own_values, split)
        prior = np.full(len(self._layouts), float(variances.sum()) + PARALLEL_SPREAD**2)
        for k, code in wide:
            prior += (WIDE**2 - 1) * variances[k] * (layouts[k] == code)
        return believe(to_measured, between, errors, prior)

    def _parallel_number(self, config: TrainConfig) -> int:
        """The config's parallel layout (`_model_errors.PARALLEL`) as a number."""
        return int(self._parallel_weights @ self._coded.encode(config).astype(np.int64))
