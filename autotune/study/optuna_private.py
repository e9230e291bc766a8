"""The only module that reaches into Optuna's private API: a trial's storage id and the
storage itself, which ask-and-tell with out-of-process trials needs for heartbeats and for
failing another process's trial. An Optuna upgrade that breaks these breaks them here."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import optuna
from optuna.storages import BaseStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState

HEARTBEAT_S = 10
"""How often a running trial's heartbeat is recorded (Optuna's grace period is 60 s)."""

T = TypeVar("T")


def storage_of(study: optuna.Study) -> BaseStorage:
    return study._storage


def study_id_of(study: optuna.Study) -> int:
    """The id the dashboard's URLs use."""
    return study._study_id


def fail_trial(study: optuna.Study, trial: FrozenTrial, attrs: dict[str, str]) -> None:
    """Fail a trial this process did not ask (its tuner died), with attributes saying why."""
    for name, value in attrs.items():
        study._storage.set_trial_user_attr(trial._trial_id, name, value)
    study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


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
        while not stop.wait(HEARTBEAT_S):
            storage.record_heartbeat(trial_id)

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    try:
        return work()
    finally:
        stop.set()
        beating.join()
