"""Noise, in one place: the confirmation of leaders, the NCCL verdict, the summary and
best.yaml take the spreads they compare against from here.

Two kinds of noise: the spread of step times inside one trial, and the spread between
trials of the same config (another launch, another moment of a shared machine), which is
larger and is what decides whether a config is faster. The second is measured from the
study's own repeated configs (`between_trials`), and kept per cluster for the next study."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.confidence import EARLY_STOP_SIGMAS
from autotune.errors import InputError
from autotune.specs import Workload
from autotune.study.record.trial_attrs import NOISE_PRIOR, TrialAttrs

NOISE_FLOOR = 0.02
"""Differences under 2% are noise on any shared machine, whatever the trials' own spread."""
UNKNOWN_BETWEEN = 0.05
"""A measured trial's between-trial spread before any repeat says otherwise: about what a
shared machine shows (results/bench/repeatability.md measures one); a trial's own spread is
far smaller."""
LENGTH_DOF = 4
"""Degrees of freedom of the between-trial spread before trial lengths follow it alone."""
PRIOR_DOF = 4
"""The most degrees of freedom a saved spread counts for in the next study: a few repeats'
worth, so that the study's own repeats soon outweigh it."""
PRIOR_AGREES = 0.95
"""One-sided level of the F test by which the study's own repeats show launches differing
more than the prior allows; beyond it the prior is left behind. A study quieter than its
prior keeps it: a few repeats that happen to agree closely must not tighten its verdicts."""


@dataclass(frozen=True)
class Spread:
    """The between-trial spread of one config's throughput: the standard deviation of its
    logarithm (about the relative spread), pooled over repeated configs, with its degrees of
    freedom and, for one saved by an earlier study, where it comes from."""

    relative: float
    dof: int
    source: str = ""

    def pooled(self, other: Spread | None) -> Spread:
        if other is None or other.dof == 0:
            return self
        dof = self.dof + other.dof
        var = (self.relative**2 * self.dof + other.relative**2 * other.dof) / dof
        return Spread(math.sqrt(var), dof)


def spread(trial: FrozenTrial) -> float:
    """Twice the relative spread of a trial's measured step times (about a 95% band)."""
    attrs = TrialAttrs.of(trial)
    stdev, median = attrs.step_time_stdev_s, attrs.step_time_s
    return 2 * stdev / median if stdev and median else 0.0


def measurements(study: optuna.Study) -> dict[int, list[FrozenTrial]]:
    """Each config's completed trials, keyed by its first trial's number: the trial itself
    and its repeats (`CONFIRMS`)."""
    by_config: dict[int, list[FrozenTrial]] = defaultdict(list)
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.value:
            confirms = TrialAttrs.of(t).confirms
            by_config[confirms if confirms is not None else t.number].append(t)
    return dict(by_config)


def between_trials(study: optuna.Study) -> Spread | None:
    """The study's between-trial spread, from its configs measured more than once; None
    before any was."""
    squares, dof = 0.0, 0
    for trials in measurements(study).values():
        if len(trials) < 2 or TrialAttrs.of(trials[0]).source != "measured":
            continue
        logs = [math.log(t.value) for t in trials if t.value]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    return Spread(math.sqrt(squares / dof), dof) if dof else None


def study_spread(study: optuna.Study) -> Spread | None:
    """The between-trial spread every verdict of the study uses: its own repeats pooled
    with the prior from earlier studies of its kind (`NOISE_PRIOR`, set when it starts),
    unless they disagree with it."""
    prior, own = noise_prior(study), between_trials(study)
    if own is None:
        return prior
    return own.pooled(prior) if prior is not None and agrees(own, prior) else own


def noise_prior(study: optuna.Study) -> Spread | None:
    stored = study.user_attrs.get(NOISE_PRIOR)
    where = f"study {study.study_name!r}: its {NOISE_PRIOR}"
    return checked_spread(stored, where) if stored else None


def agrees(own: Spread, prior: Spread) -> bool:
    """The study's spread is no wider than its prior could have given (a one-sided F test
    on their variances)."""
    from scipy import stats

    ratio = (own.relative / max(prior.relative, 1e-9)) ** 2
    return bool(ratio <= stats.f.ppf(PRIOR_AGREES, own.dof, max(prior.dof, 1)))


def prior_note(study: optuna.Study) -> str | None:
    """Where the study's prior spread comes from, and whether its repeats left it behind."""
    prior, own = noise_prior(study), between_trials(study)
    if prior is None:
        return None
    where = f"{prior.relative:.1%} from {prior.source or 'an earlier study'} ({prior.dof} dof)"
    if own is not None and not agrees(own, prior):
        return f"prior {where} left behind: this study's repeats disagree with it"
    return f"prior {where}"


def noise_kind(engine: str, workload: Workload, framework: str | None) -> str:
    """What makes launches of a config alike besides the cluster: the engine (and the user's
    framework), dense or mixture of experts, and the model's scale (the power of ten of
    about its parameters)."""
    params = 12 * workload.num_layers * workload.hidden_size**2
    kind = "moe" if workload.is_moe else "dense"
    scale = round(math.log10(max(params, 1)))
    return "-".join([engine, *([framework] if framework else []), kind, f"1e{scale}"])


def early_stop_margin(base: float, study: optuna.Study, launches: int = 1) -> float:
    """How much slower than the best config's mean step time a trial must surely be to stop.

    The trial's level carries one launch's between-trial noise and the best's mean that of
    its `launches`, so the margin is at least what they differ by at `EARLY_STOP_SIGMAS`:
    with 10% between trials and the best launched once, 39%. Before any repeat, a measured
    study assumes a shared machine's `UNKNOWN_BETWEEN`."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    measured = any(TrialAttrs.of(t).source == "measured" for t in trials)
    sd = assumed_between(study, measured) * math.sqrt(1 + 1 / max(1, launches))
    return max(base, math.expm1(EARLY_STOP_SIGMAS * sd))


def assumed_between(study: optuna.Study, measured: bool) -> float:
    """The between-trial spread a verdict on the study takes now: its own repeats with the
    cluster's prior; before any, a shared machine's `UNKNOWN_BETWEEN` for measured trials and
    none for the model's (simulated or replayed)."""
    known = study_spread(study)
    if known is not None:
        return known.relative
    return UNKNOWN_BETWEEN if measured else 0.0


def length_spread(known: Spread | None, measured: bool) -> float:
    """The between-trial spread that sets how long a trial measures, from the one `known`
    (a study's, or the cluster's from earlier studies): itself once it rests on `LENGTH_DOF`
    degrees of freedom; before, no less than `UNKNOWN_BETWEEN` on measured trials, as a
    spread from a repeat or two is as often far too small as right."""
    if known is not None and known.dof >= LENGTH_DOF:
        return known.relative
    return max(known.relative if known else 0.0, UNKNOWN_BETWEEN if measured else 0.0)


def trial_precision(asked: float, between: float) -> float:
    """How tight a trial's own 95% interval need be where trials of one config differ by
    `between`: a config stands on the mean of its trials, and an interval within `between`
    adds at most about a quarter to each trial's variance there (half-width 1.96 standard
    errors), so measuring on to a tighter one buys time, not certainty. At least `asked`;
    0 (measure every step) stays 0."""
    return asked if asked == 0 else max(asked, between)


def checked_spread(data: object, where: str) -> Spread:
    """A between-trial spread as stored (a file, a study's attribute), checked as input is:
    a finite relative spread in [0, 10], whole degrees of freedom, a text source; else one
    line naming `where`."""
    if not isinstance(data, dict) or not {"relative", "dof"} <= set(data) <= FIELDS:
        raise InputError(f"{where}: not a between-trial spread ({', '.join(sorted(FIELDS))})")
    relative, dof, source = data["relative"], data["dof"], data.get("source", "")
    number = isinstance(relative, int | float) and not isinstance(relative, bool)
    if not number or not math.isfinite(relative) or not 0 <= relative <= 10:
        raise InputError(f"{where}: relative {relative!r} is not a spread between 0 and 10")
    if isinstance(dof, bool) or not isinstance(dof, int) or dof < 0:
        raise InputError(f"{where}: dof {dof!r} is not a count of degrees of freedom")
    if not isinstance(source, str):
        raise InputError(f"{where}: source {source!r} is not text")
    return Spread(float(relative), dof, source)


FIELDS = {"relative", "dof", "source"}


def read_spread(path: Path) -> Spread | None:
    """A cluster's between-trial spread saved by an earlier study; None when there is none.
    One that cannot be read is named in one line (it is only a prior: deleting it is safe)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    where = f"{path} (a prior from earlier studies: delete it to start afresh)"
    try:
        data = json.loads(text)
    except ValueError:
        raise InputError(f"{where}: not JSON") from None
    return checked_spread(data, where)


def remember_spread(study: optuna.Study, prior: Spread) -> None:
    """Start the study from the spread of earlier studies of its kind (`noise_kind`,
    `read_spread`), once (a resumed study keeps its own)."""
    if NOISE_PRIOR not in study.user_attrs:
        study.set_user_attr(NOISE_PRIOR, dataclasses.asdict(prior))


def save_spread(study: optuna.Study, path: Path) -> None:
    """The study's spread (its repeats with its prior) for the next study of its kind,
    named after it; its degrees of freedom capped at `PRIOR_DOF`, so that old studies never
    outweigh a new one's repeats."""
    known = study_spread(study)
    if known is not None:
        kept = Spread(known.relative, min(known.dof, PRIOR_DOF), f"study {study.study_name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(kept)) + "\n")
