"""Before naming the winner: re-measure the leaders by interleaved repeats (A B A B ...)
until the best is faster than each runner-up at the stated confidence, or surely within
2% of it (either will do), or each has had its `Effort.repeats` (or the study's repeat budget is
spent); a config then stands on the mean of all its measurements.

A trial's own interval says how well one launch knew its step time; another launch of the
same config on a shared machine can land 20% away. Only repeats, interleaved so that a slow
moment of the machine falls on every contender alike, measure that between-trial noise
(`noise.between_trials`), and only they can say the winner is faster for real."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState
from scipy import stats

from autotune.confidence import INTERVAL_TWO_SIDED_PROBABILITY, WINNER_ONE_SIDED_PROBABILITY
from autotune.space import TrainConfig, config_key, nccl_default
from autotune.study.record.optuna_private import ask_enqueued
from autotune.study.record.storage import NO_VERDICT
from autotune.study.record.trial_attrs import AFTER_CHOICE, CONFIRMS, USERS_CONFIG, TrialAttrs
from autotune.study.verdict.effort import STANDARD, Effort
from autotune.study.verdict.noise import (
    NOISE_FLOOR,
    UNKNOWN_BETWEEN,
    Spread,
    measurements,
    spread,
    study_spread,
)
from autotune.study.verdict.parity import differing_now
from autotune.study.verdict.parity_cause import read_causes

EQUIVALENT = NOISE_FLOOR
"""Two configs whose throughputs surely differ by less than this are as good as each other:
repeating them further would not change what the user should run."""
MIN_SD = 0.001
IDLE_ROUNDS = 6
"""Rounds after which a worker whose every repeat another worker took leaves the rest to
them (it reads the study once a round, without sleeping)."""


@dataclass(frozen=True)
class Standing:
    """A config as the study knows it: every completed measurement of it (its trial and its
    repeats), the latest one to export."""

    first: int
    """Its first trial's number, which its repeats name (`CONFIRMS`)."""
    trial: FrozenTrial
    """Its latest measurement."""
    values: tuple[float, ...]
    """Tokens/s of each measurement."""
    numbers: tuple[int, ...] = ()
    """The trials `values` come from, in the same order."""

    @property
    def tokens_per_s(self) -> float:
        """The geometric mean: the step-time noise is relative, so it is averaged in logs."""
        return math.exp(self.log_mean)

    @property
    def log_mean(self) -> float:
        return sum(math.log(v) for v in self.values) / len(self.values)

    @property
    def repeats(self) -> int:
        return len(self.values) - 1

    @property
    def config(self) -> TrainConfig:
        return TrialAttrs.of(self.trial).config

    def sd(self, between: Spread | None) -> float:
        """One measurement's relative spread: between trials where the study (or the
        cluster) measured it; before that, for a measured trial, a shared machine's
        (`UNKNOWN_BETWEEN`), never less than the trial's own spread or half the noise floor
        (a simulated trial's own spread is its whole noise)."""
        if between is not None:
            return max(between.relative, MIN_SD)
        measured = TrialAttrs.of(self.trial).source == "measured"
        unknown = UNKNOWN_BETWEEN if measured else 0.0
        return max(unknown, spread(self.trial) / 2, NOISE_FLOOR / 2)

    def interval(self, between: Spread | None) -> float:
        """Relative half-width of the 95% interval of its mean throughput."""
        quantile = _quantile(0.5 + INTERVAL_TWO_SIDED_PROBABILITY / 2, between)
        half = quantile * self.sd(between) / math.sqrt(len(self.values))
        return math.expm1(half)


def _quantile(p: float, between: Spread | None) -> float:
    """Student's t with the between-trial spread's degrees of freedom (normal without)."""
    dof = between.dof if between is not None else None
    return float(stats.t.ppf(p, dof) if dof else stats.norm.ppf(p))


def ratio_interval(
    best: Standing,
    other: Standing,
    between: Spread | None,
    level: float = INTERVAL_TWO_SIDED_PROBABILITY,
) -> tuple[float, float, float]:
    """best's throughput over other's: the ratio and its two-sided interval at `level`."""
    diff = best.log_mean - other.log_mean
    sd = max(best.sd(between), other.sd(between))
    se = sd * math.sqrt(1 / len(best.values) + 1 / len(other.values))
    half = _quantile(0.5 + level / 2, between) * se
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def separated(
    best: Standing,
    other: Standing,
    between: Spread | None,
    confidence: float = WINNER_ONE_SIDED_PROBABILITY,
) -> bool:
    """best is faster than other at `confidence` (one-sided)."""
    _, low, _ = ratio_interval(best, other, between, level=2 * confidence - 1)
    return low > 1


def equivalent(best: Standing, other: Standing, between: Spread | None) -> bool:
    """Their throughputs differ by less than `EQUIVALENT`, at the same confidence."""
    _, low, high = ratio_interval(best, other, between, level=2 * WINNER_ONE_SIDED_PROBABILITY - 1)
    return low > 1 / (1 + EQUIVALENT) and high < 1 + EQUIVALENT


def standings(study: optuna.Study) -> list[Standing]:
    """Each measured config's standing, best first, on the measurements that choose (not the
    winner's repeats after the choice); a config whose latest repeat failed
    (out of memory, a crash; not one stopped by the user) does not stand, nor does a slice
    study's scale probe (it measures how the slice misses, not a config), nor one whose loss
    leaves the user's (`parity`: judged again here, so a trial measured before the study's
    reference existed is judged too). A trial that runs after a confirmation (a resumed
    study, another worker) stands like any other and can win. Nor does a config that moves
    a knob a flagged trial convicted (`parity_cause`), however short its runs were."""
    failed: dict[int, int] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        attrs = TrialAttrs.of(t)
        if attrs.confirms is not None and attrs.kind not in NO_VERDICT:
            failed[attrs.confirms] = t.number
    found = []
    differing = differing_now(study)
    causes = read_causes(study)
    for first, trials in measurements(study).items():
        if TrialAttrs.of(trials[0]).scale_probe_of is not None:
            continue
        if any(t.number in differing for t in trials):
            continue
        if causes is not None and causes.convicted_moves(TrialAttrs.of(trials[0]).config):
            continue
        latest = max(trials, key=lambda t: t.number)
        chose = [t for t in trials if t.value and not TrialAttrs.of(t).after_choice]
        if failed.get(first, -1) > latest.number or not chose:
            continue
        values = tuple(float(t.value or 0) for t in chose)
        found.append(Standing(first, latest, values, tuple(t.number for t in chose)))
    return _unless_overturned(study, sorted(found, key=lambda s: -s.tokens_per_s))


def _unless_overturned(study: optuna.Study, ranked: list[Standing]) -> list[Standing]:
    """`ranked`, its first and second swapped where the first's repeats after its choice
    show it surely slower (one-sided, at the verdicts' confidence) than the runner-up's
    measurements that did not make it second: the choice does not stand against what was
    measured after it, and no winner is stated slower than what it beat."""
    if len(ranked) < 2:
        return ranked
    best, second = ranked[0], ranked[1]
    basis = on_repeats_after_choice(study, best)
    if basis is None or TrialAttrs.of(best.trial).source != "measured":
        return ranked
    level = 2 * WINNER_ONE_SIDED_PROBABILITY - 1
    _, _, high = ratio_interval(basis, unselected(second) or second, study_spread(study), level)
    return [second, best, *ranked[2:]] if high < 1 else ranked


Ranking = Callable[[optuna.Study], list[Standing]]
"""The standings a choice is made among: all of them (`standings`), or, in a slice study,
those measured on the slice or those measured at full size, never both."""


def best_mean(study: optuna.Study) -> tuple[float | None, float]:
    """The best config's mean throughput (None before any) and the standard error of its
    logarithm: what the search's stop rule compares with."""
    ranked = standings(study)
    if not ranked:
        return None, 0.0
    best = ranked[0]
    return best.tokens_per_s, best.sd(study_spread(study)) / math.sqrt(len(best.values))


def best_step_time(study: optuna.Study, besides: int | None = None) -> tuple[float, int] | None:
    """The best config's mean step time (its standing, not its luckiest launch) and how many
    launches it is the mean of; None before any trial completed, or where the best is the
    config whose first trial is `besides`: how long the next trial measures depends on it."""
    ranked = standings(study)
    if not ranked or ranked[0].first == besides:
        return None
    best = ranked[0]
    step = TrialAttrs.of(best.trial).step_time_s
    if not step or not best.trial.value:
        return None
    return step * best.trial.value / best.tokens_per_s, len(best.values)


def contenders(
    study: optuna.Study, effort: Effort = STANDARD, ranking: Ranking = standings
) -> list[Standing]:
    """The configs to repeat next: the best and each runner-up it is not surely faster than
    (and, when the best forces NCCL settings, the same layout with NCCL's defaults; and the
    user's own config until it has launched twice), those with repeats left and none
    running; [] when the best stands apart. Where launches differ by 10%, one launch of the
    fastest config reads 20% low often enough to fall behind several others, so several
    runners-up are repeated; settled ones leave at once."""
    ranked = [s for s in ranking(study) if TrialAttrs.of(s.trial).source == "measured"]
    if len(ranked) < 2:
        return []
    between = study_spread(study)
    best = ranked[0]
    if between is None and best.repeats == 0:
        # Nothing yet says how far launches of one config differ: a lead of any size may be
        # one lucky launch. The first round measures that spread on the best two.
        close = ranked[1:2]
    else:
        unsettled = [s for s in ranked[1:] if not _settled(best, s, between, effort)]
        # The closest with repeats left; those out of repeats only keep the best repeating.
        close = [s for s in unsettled if s.repeats < effort.repeats][: effort.contenders - 1]
        close = close or unsettled[:1]
    baseline = nccl_baseline(best, ranked)
    if (
        baseline is not None
        and baseline not in close
        and min(best.repeats, baseline.repeats) < effort.repeats
    ):
        # An NCCL setting is kept only when its repeats show it faster (study/nccl_verdict):
        # up to `effort.repeats` each whatever they show, so that stopping once it looks faster
        # cannot make it so.
        close.append(baseline)
    yours = _users_config(study, ranked)
    if yours is not None and yours is not best and yours not in close and yours.repeats < 1:
        close.append(yours)  # your own config, the baseline, gets a second launch
    if not close:
        return []
    running = _repeats_running(study)
    if baseline in close:  # right after the best: a repeat limit cuts runners-up first
        close = [baseline, *(s for s in close if s is not baseline)]
    return [s for s in [best, *close] if s.repeats < effort.repeats and s.first not in running]


def _users_config(study: optuna.Study, ranked: list[Standing]) -> Standing | None:
    """The standing of the user's own config (a study of their command), if it ran."""
    key = study.user_attrs.get(USERS_CONFIG)
    if key is None:
        return None
    return next((s for s in ranked if config_key(s.config) == key), None)


def _settled(best: Standing, other: Standing, between: Spread | None, effort: Effort) -> bool:
    return (
        separated(best, other, between)
        or equivalent(best, other, between)
        or (
            effort.indifference is not None
            and not_faster_by(best, other, between, effort.indifference)
        )
    )


def not_faster_by(best: Standing, other: Standing, between: Spread | None, gap: float) -> bool:
    """other is surely (one-sided, at the verdicts' confidence) not faster than best by
    `gap` or more."""
    _, low, _ = ratio_interval(best, other, between, level=2 * WINNER_ONE_SIDED_PROBABILITY - 1)
    return low > 1 / (1 + gap)


def unselected(standing: Standing) -> Standing | None:
    """A measured config's repeats without the trial that made it lead (that one was chosen
    for being fast, so it reads high: testing on it finds gains that are not there); None
    without repeats. A prediction (simulated) has no noise to select on: all of it."""
    if TrialAttrs.of(standing.trial).source != "measured":
        return standing
    if standing.repeats < 1:
        return None
    return Standing(standing.first, standing.trial, standing.values[1:], standing.numbers[1:])


def nccl_baseline(best: Standing, ranked: list[Standing]) -> Standing | None:
    """The standing of best's layout with NCCL's defaults, when best forces NCCL settings
    and that layout was measured."""
    if best.config == nccl_default(best.config):
        return None
    layout = config_key(nccl_default(best.config))
    return next((s for s in ranked if config_key(s.config) == layout), None)


def _repeats_running(study: optuna.Study) -> set[int]:
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return {a.confirms for a in map(TrialAttrs.of, running) if a.confirms is not None}


def confirm(
    study: optuna.Study,
    params_of: Callable[[TrainConfig], dict[str, object]],
    distributions: dict[str, optuna.distributions.BaseDistribution],
    run: Callable[[optuna.Trial, TrainConfig], object],
    time_left: Callable[[], bool] = lambda: True,
    limit: int | None = None,
    effort: Effort = STANDARD,
    ranking: Ranking = standings,
) -> list[int]:
    """Rounds of one repeat per contender, the order rotated each round (the best first in
    a round the limit cuts short), while contenders remain (a config leaves them at
    `effort.repeats` repeats), `time_left()` and fewer than `limit` repeats ran; returns the
    repeats' trial numbers. Each repeat is asked as the very trial queued for it, so seeds
    still queued stay queued for the search."""
    numbers: list[int] = []
    round_ = 0
    # Rounds go on while contenders have repeats left (each has at most `effort.repeats`), so a
    # config that takes the lead late, after the first leader's repeats, is repeated too.
    while group := contenders(study, effort, ranking):
        shift, round_, before = round_ % len(group), round_ + 1, len(numbers)
        order = group[shift:] + group[:shift]
        if limit is not None and limit - len(numbers) < len(order):  # the limit cuts it:
            order = [group[0], *(s for s in order if s is not group[0])]  # the best first
        for standing in order:
            if not time_left() or (limit is not None and len(numbers) >= limit):
                return numbers
            if standing.first in _repeats_running(study):
                continue
            params = params_of(standing.config)
            trial = ask_enqueued(study, params, {CONFIRMS: standing.first}, distributions)
            if trial is None:  # another worker took it first: no repeat of ours this round
                continue
            run(trial, standing.config)
            numbers.append(trial.number)
        if len(numbers) == before and round_ >= IDLE_ROUNDS:  # each repeat another worker's
            break
    return numbers


def after_choice(study: optuna.Study, ranking: Ranking = standings) -> list[float]:
    """Tokens/s of the winner's repeats taken after it was chosen (the winner: the first of
    `ranking`)."""
    ranked = ranking(study)
    return repeats_after_choice(study, ranked[0].first) if ranked else []


def repeats_after_choice(study: optuna.Study, first: int) -> list[float]:
    """Tokens/s of the repeats of config `first` (its first trial's number) taken after it
    was chosen."""
    return [float(t.value or 0) for t in _after_choice_trials(study, first)]


def on_repeats_after_choice(study: optuna.Study, standing: Standing) -> Standing | None:
    """The config's standing on its repeats taken after it was chosen; None without any."""
    after = _after_choice_trials(study, standing.first)
    if not after:
        return None
    values = tuple(float(t.value or 0) for t in after)
    return Standing(standing.first, standing.trial, values, tuple(t.number for t in after))


def _after_choice_trials(study: optuna.Study, first: int) -> list[FrozenTrial]:
    done = measurements(study).get(first, [])
    return [t for t in done if t.value and TrialAttrs.of(t).after_choice]


def repeat_winner(
    study: optuna.Study,
    params_of: Callable[[TrainConfig], dict[str, object]],
    distributions: dict[str, optuna.distributions.BaseDistribution],
    run: Callable[[optuna.Trial, TrainConfig], object],
    count: int,
    time_left: Callable[[], bool],
    ranking: Ranking = standings,
) -> list[int]:
    """Up to `count` repeats of the winner chosen from `ranking` (fewer where it has some),
    each while `time_left()`, marked `AFTER_CHOICE`: its figures are stated from them (a
    winner they overturn, `standings`, leaves the lead to the runner-up, repeated alike);
    returns their trial numbers."""
    numbers: list[int] = []
    while (ranked := ranking(study)) and len(after_choice(study, ranking)) < count and time_left():
        best = ranked[0]
        if TrialAttrs.of(best.trial).source != "measured":
            break
        marks: dict[str, object] = {CONFIRMS: best.first, AFTER_CHOICE: True}
        trial = ask_enqueued(study, params_of(best.config), marks, distributions)
        if trial is None:
            break
        run(trial, best.config)
        numbers.append(trial.number)
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not any(t.number == trial.number for t in done):  # it failed: the next would too
            break
    return numbers
