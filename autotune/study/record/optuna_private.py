"""The only module that reaches into Optuna's private API: a trial's storage id and the
storage itself, which ask-and-tell with out-of-process trials needs for heartbeats, for
failing another process's trial and for asking one queued trial rather than the oldest.
An Optuna upgrade that breaks these breaks them here."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState

from autotune.study.record.owner import owner_tag
from autotune.study.record.trial_attrs import OWNER

HEARTBEAT_S = 10
"""How often a running trial's heartbeat is recorded (Optuna's grace period is 60 s)."""

T = TypeVar("T")


def storage_of(study: optuna.Study) -> BaseStorage:
    return study._storage


def storage_url_of(study: optuna.Study) -> str | None:
    """The URL of the study's database (RDB storages, as Optuna wraps them in a cache; None
    for others)."""
    storage = getattr(study._storage, "_backend", study._storage)
    url = getattr(storage, "url", None)
    return str(url) if url is not None else None


def study_id_of(study: optuna.Study) -> int:
    """The id the dashboard's URLs use."""
    return study._study_id


def fail_trial(study: optuna.Study, trial: FrozenTrial, attrs: dict[str, str]) -> None:
    """Fail a trial this process did not ask (its tuner died), with attributes saying why."""
    for name, value in attrs.items():
        study._storage.set_trial_user_attr(trial._trial_id, name, value)
    study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


def fail_stale_trials(study: optuna.Study, attrs: dict[str, str]) -> list[int]:
    """Optuna's `fail_stale_trials` (RUNNING trials whose heartbeat stopped, where the
    storage keeps heartbeats), each given `attrs` first, which a finished trial can no
    longer take; the numbers of the trials failed."""
    storage = study._storage
    if not isinstance(storage, BaseHeartbeat) or storage.get_heartbeat_interval() is None:
        return []
    failed = []
    for trial_id in storage._get_stale_trial_ids(study._study_id):
        try:
            for name, value in attrs.items():
                storage.set_trial_user_attr(trial_id, name, value)
            if storage.set_trial_state_values(trial_id, TrialState.FAIL):
                failed.append(storage.get_trial_number_from_id(trial_id))
        except UpdateFinishedTrialError:  # another process failed or finished it first
            continue
    return failed


def ask_enqueued(
    study: optuna.Study,
    params: dict[str, object],
    user_attrs: dict[str, object],
    distributions: dict[str, BaseDistribution],
) -> optuna.Trial | None:
    """Queue a trial and ask that one, held by this process (`owner`): `study.ask` hands out
    the oldest queued trial, which may be a seed nobody ran yet or another worker's. None
    when every queued trial like it was taken first (by a worker queueing the same one)."""
    study.enqueue_trial(params, user_attrs=user_attrs)
    study._thread_local.cached_all_trials = None  # as `Study.ask` does: read storage afresh
    storage = study._storage
    queued = storage.get_all_trials(study._study_id, deepcopy=False, states=(TrialState.WAITING,))
    for frozen in sorted(queued, key=lambda t: -t.number):  # ours is the newest like it
        if any(frozen.user_attrs.get(k) != v for k, v in user_attrs.items()):
            continue
        try:
            if not storage.set_trial_state_values(frozen._trial_id, TrialState.RUNNING):
                continue
        except UpdateFinishedTrialError:
            continue
        trial = optuna.Trial(study, frozen._trial_id)
        trial.set_user_attr(OWNER, owner_tag())
        for name, distribution in distributions.items():
            trial._suggest(name, distribution)  # as `study.ask(distributions)` does
        return trial
    return None


def with_heartbeat(study: optuna.Study, trial: optuna.Trial, work: Callable[[], T]) -> T:
    """Run `work` while recording the trial's heartbeat, so a worker that dies has its trial
    failed by the others after the grace period (storages without heartbeats: just run)."""
    storage = study._storage
    if not isinstance(storage, BaseHeartbeat):  # in-memory studies (benchmarks)
        return work()
    trial_id = trial._trial_id
    storage.record_heartbeat(trial_id)
    stop = threading.Event()

    def beat() -> None:
        # A storage that fails stops the beat, not the trial: the tell after it says why.
        with contextlib.suppress(Exception):
            while not stop.wait(HEARTBEAT_S):
                storage.record_heartbeat(trial_id)

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    try:
        return work()
    finally:
        stop.set()
        beating.join()
