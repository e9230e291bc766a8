"""What the study knows, read from every worker's trials: which configs have a verdict,
which are claimed or running, and the best value so far."""

from __future__ import annotations

import datetime

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study.record.storage import NO_VERDICT
from autotune.study.record.trial_attrs import CLAIM, PRUNED_AS, PRUNED_REASON, Pruned, TrialAttrs

AWAIT_S = 2.0
"""How often a worker that waits on other workers' running trials looks again."""


def skip(study: optuna.Study, trial: optuna.Trial, as_: Pruned, why: str) -> None:
    """Tell `trial` PRUNED without running it, as `as_` and `why` in words."""
    trial.set_user_attr(PRUNED_AS, as_)
    trial.set_user_attr(PRUNED_REASON, why)
    study.tell(trial, state=TrialState.PRUNED)


def verdicts(study: optuna.Study) -> dict[str, int]:
    """Config key -> trial number, for configs that completed, failed or were stopped early
    (not those interrupted or run on a slow node, which may run again)."""
    found: dict[str, int] = {}
    states = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
    for t in study.get_trials(deepcopy=False, states=states):
        attrs = TrialAttrs.of(t)
        if attrs.config_key is not None and attrs.kind not in NO_VERDICT:
            found.setdefault(attrs.config_key, t.number)
    return found


def claim(study: optuna.Study, trial: optuna.Trial, key: str) -> int | None:
    """Mark the config as this trial's; the number of another trial that holds it (running
    or with a verdict) when two workers took it at once, else None.

    Each worker marks before it looks, so of two that take a config at once the later to
    look sees the other's mark, whatever their trial numbers, and gives way (both may, and
    the config is proposed again later; neither measures it twice)."""
    trial.set_user_attr(CLAIM, key)

    def holds(t: FrozenTrial) -> bool:
        attrs = TrialAttrs.of(t)
        if t.number == trial.number or attrs.kind in NO_VERDICT:
            return False
        if t.state == TrialState.RUNNING:
            return attrs.claim == key
        return attrs.config_key == key and t.state in (
            TrialState.COMPLETE,
            TrialState.FAIL,
            TrialState.PRUNED,
        )

    holders = [t.number for t in study.get_trials(deepcopy=False) if holds(t)]
    return min(holders) if holders else None


def best_value(study: optuna.Study) -> float | None:
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return max((t.value for t in done if t.value is not None), default=None)


def running_keys(study: optuna.Study, but: int | None = None) -> set[str]:
    """Configs other workers are measuring right now (claimed by a running trial other than
    trial `but`)."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    claims = (TrialAttrs.of(t).claim for t in running if t.number != but)
    return {key for key in claims if key is not None}


def in_flight(study: optuna.Study, seen: dict[str, int], but: int | None = None) -> int:
    """Configs without a verdict in `seen` that other workers are measuring now (trial `but`
    aside)."""
    return len(running_keys(study, but) - seen.keys())


def budget_taken(study: optuna.Study, budget: int, mine: int) -> bool:
    """Whether the trials with a verdict and those other workers run spend `budget`, the
    claimed trial `mine` aside. Each worker claims before it counts, so of two that take the
    last trial at once, at least the later to count gives way (both may, and try again)."""
    seen = verdicts(study)
    return len(seen) + in_flight(study, seen, but=mine) >= budget


def collisions(study: optuna.Study, since: datetime.datetime) -> dict[str, int]:
    """Configs a worker gave way on to another's claim since `since`, each with the lowest
    number of the trials that gave it way: the worker that ran that trial retries the
    config (on its next proposal, so only recent collisions are waiting for it; one whose
    worker has stopped since is anyone's again)."""
    lowest: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)):
        attrs = TrialAttrs.of(t)
        key = attrs.claim
        if (
            attrs.pruned_as == Pruned.CLAIMED
            and key is not None
            and t.datetime_complete is not None
            and t.datetime_complete >= since
        ):
            lowest[key] = min(lowest.get(key, t.number), t.number)
    return lowest
