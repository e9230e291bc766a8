"""Tuning that pays for itself: what a study costs in GPU-hours against what its winner saves
over the production run it tunes for (`--production 14d`, or `250000 steps`).

The stop rule: before each trial, the next trial's cost (the median GPU-hours of the trials
so far, as `slice.cost` charges them) against its expected saving: the production run's
GPU-hours times the expected share of them that the guided search's most promising open
config would save, E[max(0, 1 - best/new)] under its belief (the expected improvement of
Bayesian optimisation, in the units users budget in), taken down by how much of what it
promised its latest trials delivered (`kept_promise`). The study stops, after `MIN_TRIALS`,
when the next trial is expected to cost more than it saves, or to save less than
`MIN_SHARE` of the run.

The account, read by the summary, best.yaml and the report: the tuning's cost, and against
the user's own config (measured) what the winner saves over the production run, with its
95% interval, and the production length after which tuning has paid for itself."""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState
from scipy import special

from autotune.errors import InputError
from autotune.specs import Cluster
from autotune.study.record.storage import stored_specs
from autotune.study.record.trial_attrs import PROMISED
from autotune.study.search.production import Production
from autotune.study.slice.cost import study_cost, trial_gpu_hours
from autotune.study.verdict.figures import Figures
from autotune.units import human_duration

PROMISE_PRIOR = 0.03
"""How much promise the search is trusted with before any trial kept or broke it: as if a
trial promising a 3% saving had delivered it."""
PROMISE_WINDOW = 8
"""The search trials `kept_promise` reads, the latest: a search that found much early and
nothing since is judged on what it finds now."""
MIN_TRIALS = 4
"""Trials a study runs before the rule may stop it: the smallest budget anyone runs, and what
`kept_promise` needs to have read the search's promises at all (stopping after 2 trials
cost up to 28% in the benchmark's worlds, after 4 at most 10%)."""
MIN_SHARE = 0.0003
"""The stop rule's floor: a trial expected to save less than this share of the production
run is not worth its cluster time, whatever it costs."""


def expected_share(expected: np.ndarray, unc: np.ndarray, best_log: float) -> float:
    """The largest expected share of production time one more trial saves: over the open
    configs (log tokens/s `expected`, uncertainty `unc`), E[max(0, 1 - exp(best_log - X))],
    approximated by the expected improvement in logs (exact to first order)."""
    if not len(expected):
        return 0.0
    sd = np.maximum(unc, 1e-9)
    z = (expected - best_log) / sd
    improvement = sd * np.exp(-0.5 * z**2) / math.sqrt(2 * math.pi) + (
        expected - best_log
    ) * special.ndtr(z)
    return float(-np.expm1(-improvement.max()))


def kept_promise(study: optuna.Study) -> float:
    """The share of what the search's beliefs promised (`PROMISED`) that its trials delivered,
    at most 1: each trial's gain on the best before it (0 where it was slower) against the
    saving expected of it, summed, with `PROMISE_PRIOR` of both. Its belief in a layout's own
    error holds for one layout drawn at random; the best of thousands it has not measured
    promises more than the next trial tends to find."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    kept: list[tuple[float, float]] = []
    best = None
    for trial in sorted(done, key=lambda t: t.number):
        if not trial.value:
            continue
        if (share := trial.user_attrs.get(PROMISED)) is not None and best is not None:
            kept.append((float(share), max(0.0, 1 - best / trial.value)))
        best = max(best or 0.0, trial.value)
    recent = kept[-PROMISE_WINDOW:]
    promised = PROMISE_PRIOR + sum(p for p, _ in recent)
    delivered = PROMISE_PRIOR + sum(d for _, d in recent)
    return min(1.0, delivered / promised)


def trial_cost(study: optuna.Study, cluster: Cluster) -> float | None:
    """The next trial's expected cost in GPU-hours: the median of the trials so far."""
    ran = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
    costs = [c for t in ran if (c := trial_gpu_hours(t, cluster)) > 0]
    return statistics.median(costs) if costs else None


def stop_reason(
    study: optuna.Study,
    cluster: Cluster,
    beliefs: tuple[np.ndarray, np.ndarray],
    best: tuple[float | None, float],
    step_time_s: float | None,
) -> str | None:
    """Why another trial does not pay (`beliefs`: the open configs' expected log tokens/s and
    uncertainty; `best`: the best's tokens/s and the standard error of its log), or None
    where it may, or where the study tunes for no production run."""
    production, cost = Production.of(study), trial_cost(study, cluster)
    hours = production.hours_at(step_time_s) if production is not None else None
    if production is None or cost is None or hours is None or best[0] is None:
        return None
    if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) < MIN_TRIALS:
        return None
    expected, unc = beliefs
    share = expected_share(expected, np.hypot(unc, best[1]), math.log(best[0]))
    share *= kept_promise(study)
    saving = share * hours * cluster.world_size
    run = f"the {production.text} production run"
    if saving < cost:
        return (
            f"tuning stopped paying: another trial would cost {gpu_hours(cost)} GPU-hours for "
            f"an expected {gpu_hours(saving)} saved over {run}"
        )
    if share < MIN_SHARE:
        return (
            f"tuning stopped paying: another trial is expected to save {share:.2%} of {run}, "
            f"below {MIN_SHARE:.2%}"
        )
    return None


def account(study: optuna.Study, cluster: Cluster, figures: Figures | None) -> dict[str, Any]:
    """The study's economics as best.yaml keeps them and the summary states them."""
    cost = study_cost(study, cluster)
    found: dict[str, Any] = {
        "tuning_gpu_hours": cost.gpu_hours,
        "tuning_node_hours": cost.node_hours,
        "production": None,
        "saving_gpu_hours": None,
        "saving_interval_95": None,
        "pays_back_after_hours": None,
    }
    production = Production.of(study)
    found["production"] = production.text if production is not None else None
    yours = figures.yours if figures is not None else None
    if yours is None or yours.ratio <= 1:
        return found
    gpus = cluster.world_size
    found["pays_back_after_hours"] = cost.gpu_hours / (gpus * (1 - 1 / yours.ratio))
    step = _step_time(figures)
    hours = production.hours_at(step) if production is not None else None
    if hours is not None:
        found["saving_gpu_hours"] = hours * gpus * (1 - 1 / yours.ratio)
        found["saving_interval_95"] = [hours * gpus * (1 - 1 / r) for r in (yours.low, yours.high)]
    return found


def _step_time(figures: Figures | None) -> float | None:
    if figures is None:
        return None
    step = figures.basis.trial.user_attrs.get("step_time_s")
    value = figures.basis.trial.value
    return float(step) * value / figures.tokens_per_s if step and value else None


def gpu_hours(hours: float) -> str:
    """Hours as people budget them: 1,536, 16, 0.42."""
    return f"{hours:,.0f}" if abs(hours) >= 100 else f"{hours:.3g}"


def account_lines(found: dict[str, Any]) -> list[str]:
    """The summary's lines: what tuning cost, and what it saves or when it pays back."""
    lines = [
        f"tuning cost {gpu_hours(found['tuning_gpu_hours'])} GPU-hours "
        f"({gpu_hours(found['tuning_node_hours'])} node-hours)"
    ]
    if found["saving_gpu_hours"] is not None:
        low, high = found["saving_interval_95"]
        lines.append(
            f"over the {found['production']} production run the winner saves an expected "
            f"{gpu_hours(found['saving_gpu_hours'])} GPU-hours against your config "
            f"(95% interval {gpu_hours(low)} to {gpu_hours(high)})"
        )
    if found["pays_back_after_hours"] is not None:
        after = human_duration(found["pays_back_after_hours"] * 3600)
        lines.append(f"tuning pays for itself after {after} of production")
    else:
        lines.append("no saving stated: your config was not measured, or the winner is not faster")
    return lines


def study_lines(study: optuna.Study, figures: Figures | None) -> list[str]:
    """The summary's and the report's lines on the study's economics, for its own cluster;
    none for a study that keeps no cluster (export says why, in one line)."""
    try:
        cluster = stored_specs(study)[2]
    except InputError:
        return []
    return account_lines(account(study, cluster, figures))
