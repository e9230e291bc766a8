"""The winner's figures, in one place: its throughput, its interval and its ratios to the
runner-up, the user's own config and the median, as the summary, the report, best.yaml and
train.sh all state them.

A config wins for measuring fast, so the measurements that made it lead read high: with four
equal configs at 10% noise the best one's mean is several percent above the truth. The
figures therefore come from the winner's repeats taken once it was chosen, which took no part
in choosing it (`AFTER_CHOICE`; `Effort.after_choice` of them); where it has none (no
confirmation, a simulated study), from all its measurements, said so (`WITH_CHOICE`).

A slice study whose leaders ran at full size states full-size figures only: the winner is
the best of the leaders at full size, its figures come from its full-size launches, and its
ratios compare it with configs measured at full size; its slice trials (extrapolated) stand
apart, and the median and worst are read on the slice. Without full-size launches
(`--confirm-full 0`) every figure is the slice's extrapolation, said so (`EXTRAPOLATED`)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.confidence import INTERVAL_TWO_SIDED_PROBABILITY, WINNER_ONE_SIDED_PROBABILITY
from autotune.study.record.trial_attrs import FULL_OF, USERS_CONFIG, TrialAttrs
from autotune.study.verdict.confirm import (
    Standing,
    on_repeats_after_choice,
    ratio_interval,
    standings,
    unselected,
)
from autotune.study.verdict.noise import Spread, prior_note, study_spread
from autotune.study.verdict.slice_standings import full_size, full_standings, is_slice_study

AFTER_CHOICE = "repeats taken after it was chosen"
WITH_CHOICE = "all its trials, those that chose it included (they read high)"
PREDICTED = "the model's prediction"
FULL_SIZE = "its one launch at full size (chosen on the slice, which that launch took no part in)"
FULL_WITH_CHOICE = (
    "its launches at full size, those that chose it among the leaders (they read high)"
)
EXTRAPOLATED = "measured on the slice and extrapolated to the whole cluster, not at full size"
RESOLVE_GAP = 0.05
"""The gap the summary says how many more repeats would resolve."""
RESOLVE_POWER = 0.8
"""How often those repeats would resolve that gap."""
SETTLE_OPTION = "--thorough"
"""The `autotune run` option that repeats the leaders more (up to 40 times each)."""


@dataclass(frozen=True)
class Ratio:
    """The winner's throughput over another config's, with its 95% interval."""

    other: Standing
    ratio: float
    low: float
    high: float

    def as_dict(self) -> dict[str, Any]:
        """best.yaml's account: no ratio where the winner reads behind (within noise)."""
        return {
            "trial": self.other.first,
            "ratio": None if self.behind else self.ratio,
            "interval_95": [self.low, self.high],
            "within_noise": not self.faster,
        }

    @property
    def faster(self) -> bool:
        """The winner is surely faster (the interval lies above 1)."""
        return self.low > 1

    @property
    def behind(self) -> bool:
        """The winner's repeats after its choice read it slower than the other config, within
        noise (surely slower overturns the choice: `confirm.standings`): no speed-up to
        state."""
        return self.ratio < 1


@dataclass(frozen=True)
class Figures:
    """What the user is told about the winner, from `basis` (the measurements that did not
    choose it, where there are some)."""

    best: Standing
    """The winner's standing on all its measurements (what chose it)."""
    basis: Standing
    method: str
    between: Spread | None
    measured: bool
    runner_up: Ratio | None
    yours: Ratio | None
    median: float | None
    """The winner's throughput over the median of the other configs' (each on the
    measurements that chose among them); None where no other config stands."""
    worst: float | None
    configs: int
    """The other configs the median and worst are of."""
    prior: str | None = None
    """Where the between-trial spread's prior comes from (`noise.prior_note`)."""
    is_yours: bool = False
    """The winner is the config the user's own command runs today."""
    among: str = "configs measured"
    """What `median` and `worst` compare with."""
    extrapolated: bool = False
    """A slice study's figures, none of them measured at full size (`--confirm-full 0`)."""

    @property
    def tokens_per_s(self) -> float:
        return self.basis.tokens_per_s

    @property
    def interval(self) -> float:
        """Relative half-width of the 95% interval of the winner's throughput."""
        return self.basis.interval(self.between) if self.measured else 0.0

    @property
    def range(self) -> tuple[float, float]:
        """The 95% interval of the winner's throughput, tokens/s: a range a person can plan
        with (a wide relative half-width, ±250%, says less)."""
        half = math.log1p(self.interval)
        return self.tokens_per_s * math.exp(-half), self.tokens_per_s * math.exp(half)

    def ratios(self) -> list[tuple[str, Ratio]]:
        """The ratios stated, each with what it compares with."""
        named = (("the runner-up", self.runner_up), ("your own config", self.yours))
        return [(name, r) for name, r in named if r is not None]

    def as_dict(self) -> dict[str, Any]:
        """best.yaml's `standing`: the figures the summary states."""
        between = self.between
        return {
            "tokens_per_s": self.tokens_per_s,
            "interval_95": self.interval,
            "range_95": list(self.range),
            "measurements": len(self.basis.values),
            "figures_from": self.method,
            "between_trial_spread": between.relative if between is not None else None,
            "runner_up": self.runner_up.as_dict() if self.runner_up else None,
            "your_config": self.yours.as_dict() if self.yours else None,
            "median_ratio": self.median,
            "within_noise": self.tie(),
            "noise_prior": self.prior,
            "extrapolated_from_slice": self.extrapolated,
        }

    def tie(self) -> str | None:
        """In words, when the study could not separate the winner from the runner-up."""
        r = self.runner_up
        if r is None or not self.measured or r.faster:
            return None
        more = _repeats_to_resolve(self.best, r.other, self.between)
        return (
            f"trials {self.best.first} and {r.other.first} are within noise of each other; "
            f"either will do; about {more} more repeats of each would resolve a "
            f"{RESOLVE_GAP:.0%} gap (`autotune run {SETTLE_OPTION}` resumes this study and "
            "repeats its leaders more)"
        )


def winner_figures(study: optuna.Study) -> Figures | None:
    """The winner's figures; None before any config completed."""
    ranked = standings(study)
    if not ranked:
        return None
    sliced = is_slice_study(study)
    full = full_size(ranked) if sliced else []
    pool = full or ranked  # the configs the winner is compared with: measured at its size
    best, between = pool[0], study_spread(study)
    measured = TrialAttrs.of(best.trial).source == "measured"
    basis, method = _basis(study, best, bool(full), len(full)) if measured else (best, PREDICTED)
    if sliced and not full:
        method = f"{method}; {EXTRAPOLATED}"
    yours_key = study.user_attrs.get(USERS_CONFIG)
    yours = next(
        (s for s in pool[1:] if yours_key and TrialAttrs.of(s.trial).config_key == yours_key),
        None,
    )
    on_slice = [s for s in ranked if s not in full]
    # the median and worst of the other configs, each on its choosing measurements, as the
    # winner's own (never the winner against itself)
    scale = _slice_standing(study, best, on_slice) if full else best
    means = [s.tokens_per_s for s in (on_slice if full else ranked) if s.first != scale.first]
    return Figures(
        best=best,
        basis=basis,
        method=method,
        between=between,
        measured=measured,
        runner_up=_ratio(basis, _runner_up(pool[1]), between) if len(pool) > 1 else None,
        yours=_ratio(basis, yours, between) if yours is not None else None,
        median=scale.tokens_per_s / statistics.median(means) if means else None,
        worst=scale.tokens_per_s / min(means) if means else None,
        configs=len(means),
        prior=prior_note(study),
        is_yours=yours_key is not None and TrialAttrs.of(best.trial).config_key == yours_key,
        among="configs measured on the slice" if full else "configs measured",
        extrapolated=sliced and not full,
    )


def _runner_up(standing: Standing) -> Standing:
    """The runner-up on its repeats where it has some: it too came second for measuring fast,
    so the launch that put it there reads high (and the winner's lead low)."""
    return unselected(standing) or standing


def _slice_standing(study: optuna.Study, best: Standing, on_slice: list[Standing]) -> Standing:
    """The full-size winner's standing on the slice (that of the trial it confirmed), which
    the slice's median and worst are compared with; itself where it has none."""
    of = study.trials[best.first].user_attrs.get(FULL_OF)
    return next((s for s in on_slice if s.first == of), best)


def _ratio(basis: Standing, other: Standing, between: Spread | None) -> Ratio:
    ratio, low, high = ratio_interval(basis, other, between, INTERVAL_TWO_SIDED_PROBABILITY)
    return Ratio(other, ratio, low, high)


def _basis(
    study: optuna.Study, best: Standing, at_full: bool, leaders: int
) -> tuple[Standing, str]:
    """The winner's repeats taken after it was chosen (at full size, for a slice study
    whose leaders ran there); all its measurements, so named, where it has none."""
    ranked = (full_standings if at_full else standings)(study)
    after = on_repeats_after_choice(study, ranked[0]) if ranked else None
    if after is not None:
        return after, AFTER_CHOICE
    if at_full:
        return best, FULL_SIZE if leaders == 1 and len(best.values) == 1 else FULL_WITH_CHOICE
    return best, WITH_CHOICE


def _repeats_to_resolve(best: Standing, other: Standing, between: Spread | None) -> int:
    """Repeats of each of the two that would show a `RESOLVE_GAP` between them at the
    winner's confidence, `RESOLVE_POWER` of the time, beyond those each has."""
    from scipy import stats

    sd = max(best.sd(between), other.sd(between))
    z = stats.norm.ppf(WINNER_ONE_SIDED_PROBABILITY) + stats.norm.ppf(RESOLVE_POWER)
    each = math.ceil(2 * (z * sd / math.log1p(RESOLVE_GAP)) ** 2)
    return max(1, each - min(len(best.values), len(other.values)))
