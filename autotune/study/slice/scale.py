"""How a slice study's extrapolation misses at full size, learnt from the study's own
launches, and its leaders ranked with that miss before they are confirmed at full size.

The model carries what a slice measures (compute, memory, traffic inside the model-parallel
group) to the whole cluster, but not what grows with the node count beyond it: gradient
traffic that crosses more switch tiers and meets more congestion, stragglers. The miss, the
log of extrapolated over full-size tokens/s, is taken as linear in the config's
data-parallel traffic share (the model's data-parallel communication over its step, hidden
or not, at full size): `offset + traffic · share`. Its slope comes first from scale probes,
the slice's leaders measured again on twice its nodes (the miss per doubling of the nodes,
times the doublings from the slice to the whole: an underestimate where the traffic slows
faster with each doubling or meets a spine the probes do not reach), then from the leaders
measured at full size, with the probes' slope as its prior. A slope below none is taken as
none: traffic that speeds up with the nodes is noise, or the study's refit at work, never a
reason to rank the configs that send the most of it first. The offset moves every config
alike, so only full-size launches set it and it never reorders the slice's leaders. A proxy
probed with its own layout on the wider slice is read by that probe instead."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.estimate.calibration import Calibration
from autotune.estimate.predict import estimate
from autotune.problem import Problem
from autotune.space import TrainConfig
from autotune.study.record.trial_attrs import FULL_OF, GUESSED, RANKED_BY, SLICE_TOKENS, TrialAttrs
from autotune.study.slice.trials import observed_as
from autotune.study.verdict.confirm import Standing, standings
from autotune.study.verdict.noise import NOISE_FLOOR, assumed_between, measurements, study_spread

MIN_SHARE_SPREAD = 0.02
"""Leaders whose traffic shares differ by less cannot tell a slope from noise."""
PRIOR_SLOPE_SD = 0.25
"""How far the full-size slope may stray from the probes' before the full-size launches
must say so: at least this, or half the probes' slope."""


@dataclass(frozen=True)
class ScaleFit:
    """The extrapolation's miss at full size: log(extrapolated / full-size tokens/s) =
    `offset + traffic · share`."""

    offset: float = 0.0
    traffic: float = 0.0

    def miss(self, share: float) -> float:
        return self.offset + self.traffic * share


def probe_nodes(nodes: int, cluster_nodes: int) -> int | None:
    """The nodes a scale probe runs on: twice the slice's, where that is still a slice of
    the cluster (a whole share of its replicas, short of all of it); None where not."""
    doubled = 2 * nodes
    return doubled if doubled < cluster_nodes and cluster_nodes % doubled == 0 else None


def traffic_share(problem: Problem, config: TrainConfig, calibration: Calibration) -> float:
    """The model's data-parallel communication over the step of `config` at full size."""
    p = problem
    step = estimate(p.workload, config, p.cluster, p.engine.traits, calibration).step
    return step.dp_comm_s / step.total_s if step.total_s > 0 else 0.0


def leader_under_miss(
    problem: Problem,
    completed: list[tuple[TrainConfig, float, bool]],
    slope: float,
    calibration: Calibration,
) -> tuple[TrainConfig, float] | None:
    """The best of `completed` (config, tokens/s, whether that is a slice's extrapolation),
    each extrapolation taken down by `slope` times its traffic share; a full-size
    measurement stands as it is."""

    def moved(config: TrainConfig, value: float, extrapolated: bool) -> float:
        if not slope or not extrapolated:
            return value
        return value * math.exp(-slope * traffic_share(problem, config, calibration))

    scored = [(c, moved(c, v, e)) for c, v, e in completed]
    return max(scored, key=lambda c: c[1], default=None)


def apart_in_share(
    leaders: list[Standing], count: int, problem: Problem, calibration: Calibration
) -> list[Standing]:
    """The first `count` of `leaders` whose traffic shares each lie `MIN_SHARE_SPREAD` or
    more from those of the ones before them."""
    chosen: list[tuple[float, Standing]] = []
    for leader in leaders:
        share = traffic_share(problem, leader.config, calibration)
        if len(chosen) < count and all(abs(share - s) >= MIN_SHARE_SPREAD for s, _ in chosen):
            chosen.append((share, leader))
    return [leader for _, leader in chosen]


def fit_scale(
    doubling: list[tuple[float, float]],
    full: list[tuple[float, float]],
    doublings: float,
    noise: float,
) -> ScaleFit:
    """The miss from (share, log miss per doubling) of each probe (`probes_slope`) and
    (share, log miss at full size) of each leader measured there; `doublings` from the slice
    to the whole, `noise` the spread of one launch's log."""
    prior = doublings * probes_slope(doubling, noise)
    if not full:
        return ScaleFit(0.0, prior)
    shares = [s for s, _ in full]
    misses = [m for _, m in full]
    mean_share, mean_miss = sum(shares) / len(shares), sum(misses) / len(misses)
    sxx = sum((s - mean_share) ** 2 for s in shares)
    sxy = sum((s - mean_share) * (m - mean_miss) for s, m in full)
    prior_var = max(PRIOR_SLOPE_SD, abs(prior) / 2) ** 2
    var = max(noise, NOISE_FLOOR / 2) ** 2
    slope = max(0.0, (sxy / var + prior / prior_var) / (sxx / var + 1 / prior_var))
    return ScaleFit(mean_miss - slope * mean_share, slope)


def probes_slope(points: list[tuple[float, float]], noise: float) -> float:
    """The miss per doubling and unit of share the probes' (share, log miss) show: the
    least-squares slope, shrunk by its standard error where launches differ by `noise`
    (each point a difference of two launches' logs), so that a slope the probes cannot
    tell from noise is taken as none, not multiplied by every doubling to the whole; 0
    without two shares far enough apart, or below none."""
    if len(points) < 2:
        return 0.0
    if max(s for s, _ in points) - min(s for s, _ in points) < MIN_SHARE_SPREAD:
        return 0.0
    mean_s = sum(s for s, _ in points) / len(points)
    mean_m = sum(m for _, m in points) / len(points)
    sxx = sum((s - mean_s) ** 2 for s, _ in points)
    slope = sum((s - mean_s) * (m - mean_m) for s, m in points) / sxx
    if slope <= 0:
        return 0.0
    standard_error = noise * math.sqrt(2 / sxx)
    return slope * max(0.0, 1 - (standard_error / slope) ** 2)


@dataclass(frozen=True)
class _Reading:
    """A slice study's leaders as `ScaleView` reads them, each by its first trial's number."""

    leaders: list[Standing]
    values: dict[int, float]
    """Log tokens/s at full size, extrapolated as from the slice."""
    shares: dict[int, float]
    own_layout: frozenset[int]
    """Those whose value is a measurement of their own layout: on the slice, or a proxy's
    on the wider slice."""
    doubling: list[tuple[float, float]]
    """(share, log miss of one doubling) of each leader probed with its own layout."""


@dataclass(frozen=True)
class ScaleView:
    """A slice study's trials read for its scale: the leaders on the slice, their probes and
    their full-size launches, every extrapolation made again under the study's current fit
    (a trial's own was made under the fit of its day, which drifts more between early and
    late trials than a probe's doubling moves them)."""

    study: optuna.Study
    problem: Problem
    nodes: int
    calibration: Callable[[], Calibration]

    def slice_leaders(self) -> list[Standing]:
        """The configs measured on the slice (or ranked by the model), best extrapolation
        (as their trials made it) first."""
        return [s for s in standings(self.study) if s.trial.user_attrs.get(RANKED_BY) in GUESSED]

    def fit(self) -> ScaleFit:
        """The miss, from every probe and full-size launch of the study so far."""
        return self._fit(self._read())

    def _fit(self, read: _Reading) -> ScaleFit:
        trials = self.study.get_trials(deepcopy=False)
        full = []
        for s in standings(self.study):
            first = trials[s.first].user_attrs.get(FULL_OF)
            if first in read.own_layout:  # a proxy's own error would pass for the slope's
                full.append((read.shares[first], read.values[first] - s.log_mean))
        return fit_scale(read.doubling, full, self.doublings, self._noise())

    def _noise(self) -> float:
        """How far one launch's log strays: the study's between-trial spread (none for a
        simulated study, whose trials are the model's)."""
        return assumed_between(self.study, _measured(self.study))

    def slope_probed(self) -> bool:
        """Whether a leader measured with its own layout has a completed probe."""
        return bool(self._read().doubling)

    @property
    def doublings(self) -> float:
        """Doublings of the nodes from the slice to the whole cluster."""
        return math.log2(self.problem.cluster.nodes / self.nodes)

    def ranked(self) -> list[Standing]:
        """The slice's leaders by their extrapolation moved by the miss learnt so far (`fit`),
        best first, each launch's tokens/s moved alike so that their mean is that score (the
        launches' spread stays their own): what the slice's repeats compare and the
        confirmations rank; the leaders, their values and the fit from one reading of the
        study."""
        read = self._read()
        fit = self._fit(read)
        moved = []
        for s in read.leaders:
            if s.first in read.values:
                shift = read.values[s.first] - fit.miss(read.shares[s.first]) - s.log_mean
                values = tuple(v * math.exp(shift) for v in s.values)
                moved.append(dataclasses.replace(s, values=values))
        return sorted(moved, key=lambda s: -s.log_mean)

    def best_moved(self, traffic: float) -> tuple[float | None, float]:
        """The best leader's extrapolation taken down by `traffic` times its traffic share
        (no offset: the search compares configs, not levels), and the standard error of its
        log: what the search's stop rule compares with once the probes have spoken."""
        read = self._read()
        scored = [
            (read.values[s.first] - traffic * read.shares[s.first], s)
            for s in read.leaders
            if s.first in read.values
        ]
        if not scored:
            return None, 0.0
        score, best = max(scored, key=lambda pair: pair[0])
        sd = best.sd(study_spread(self.study)) / math.sqrt(len(best.values))
        return math.exp(score), sd

    def _read(self) -> _Reading:
        """The leaders' extrapolations under the current fit, as from the slice: a proxy's
        replaced by its own layout's, where a probe measured that on a wider slice (moved
        back by the one doubling it saved, at the probes' slope)."""
        cal = self.calibration()
        leaders = self.slice_leaders()
        shares = {s.first: traffic_share(self.problem, s.config, cal) for s in leaders}
        kinds = {s.first: s.trial.user_attrs.get(RANKED_BY) for s in leaders}
        values = self._extrapolations(leaders, cal)
        doubling, promoted = [], {}
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            first = TrialAttrs.of(t).scale_probe_of
            probe = _extrapolated(self.problem, t, cal) if first in values else None
            if first is None or probe is None or t.user_attrs.get(RANKED_BY) != "slice":
                continue
            if kinds[first] == "slice":
                doubling.append((shares[first], values[first] - probe))
            else:
                promoted[first] = probe
        per_doubling = probes_slope(doubling, self._noise())
        values.update({f: v + per_doubling * shares[f] for f, v in promoted.items()})
        own = {f for f, kind in kinds.items() if kind == "slice"} | set(promoted)
        return _Reading(leaders, values, shares, frozenset(own & set(values)), doubling)

    def _extrapolations(self, leaders: list[Standing], cal: Calibration) -> dict[int, float]:
        """Each leader's log extrapolated tokens/s under `cal`: the mean over its launches
        on the slice, or the model's own for one it ranked."""
        trials = measurements(self.study)
        found = {}
        for s in leaders:
            logs = [_extrapolated(self.problem, t, cal) for t in trials.get(s.first, [])]
            known = [v for v in logs if v is not None]
            if known:
                found[s.first] = sum(known) / len(known)
        return found


def _extrapolated(problem: Problem, trial: FrozenTrial, cal: Calibration) -> float | None:
    """The log tokens/s at full size of a trial's slice (or proxy) measurement under `cal`,
    or of the model's prediction for one the model ranked; None for a full-size one."""
    attrs = TrialAttrs.of(trial)
    p, traits = problem, problem.engine.traits
    full = estimate(p.workload, attrs.config, p.cluster, traits, cal).step.total_s
    if trial.user_attrs.get(RANKED_BY) == "model":
        return math.log(p.workload.tokens_per_step / full)
    measured = trial.user_attrs.get(SLICE_TOKENS)
    seen = observed_as(p, trial.user_attrs, attrs.config)
    if not measured or seen is None or trial.user_attrs.get(RANKED_BY) == "full":
        return None
    workload, cluster, config = seen
    on_slice = estimate(workload, config, cluster, traits, cal).step.total_s
    step = workload.tokens_per_step / measured * full / on_slice
    return math.log(p.workload.tokens_per_step / step)


def _measured(study: optuna.Study) -> bool:
    return any(TrialAttrs.of(t).source == "measured" for t in study.get_trials(deepcopy=False))
