"""A trial whose tuner died is failed as interrupted, so its config may run again (a scale
probe or full-size launch included): at once when the tuner ran on this host, after the
heartbeat's grace period when it ran elsewhere."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.study.record.storage import INTERRUPTED, fail_abandoned_trials
from autotune.study.record.trial_attrs import CONFIG_KEY, OWNER, TrialAttrs
from autotune.study.record.verdicts import verdicts


def _running_trial(storage: optuna.storages.BaseStorage, owner: str) -> optuna.Study:
    study = optuna.create_study(storage=storage, direction="maximize")
    trial = study.ask()
    trial.set_user_attr(CONFIG_KEY, "a config")
    trial.set_user_attr(OWNER, owner)
    return study


def _interrupted(study: optuna.Study) -> bool:
    (trial,) = study.get_trials()
    return trial.state == TrialState.FAIL and TrialAttrs.of(trial).kind == INTERRUPTED


def test_a_trial_whose_tuner_died_on_this_host_is_interrupted_at_once() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    study = _running_trial(
        optuna.storages.InMemoryStorage(), f"{socket.gethostname()}:{gone.pid}:1.0"
    )
    assert fail_abandoned_trials(study) == [0]
    assert _interrupted(study) and verdicts(study) == {}


def test_a_trial_whose_tuner_elsewhere_stopped_its_heartbeat_is_interrupted(
    tmp_path: Path,
) -> None:
    storage = optuna.storages.RDBStorage(
        f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval=1, grace_period=1
    )
    study = _running_trial(storage, "another-host:1234:1.0")
    (trial,) = study.get_trials()
    storage.record_heartbeat(trial._trial_id)
    assert fail_abandoned_trials(study) == []  # alive while its heartbeat is recent
    time.sleep(2.5)
    assert fail_abandoned_trials(study) == [0]
    assert _interrupted(study) and verdicts(study) == {}
