"""When a study stops before its budget because every trial would fail the same: a trial time
limit too short for any trial here (once every trial was killed at it, to the end of the
budget)."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.problem import load_problem
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.settings import Budget, SearchSettings
from tests.fakes import Quiet, new_study

optuna.logging.set_verbosity(optuna.logging.ERROR)


class TimesOut(Launcher):
    """A cluster where every trial outlasts its limit."""

    name = "times-out"

    def command(self, request: LaunchRequest) -> list[str]:
        return ["sleep", "inf"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        limit = request.time_limit_s
        return LaunchOutcome(
            kind="timeout", error=f"killed at the time limit after {limit:.0f} s", wall_s=limit
        )


def test_a_time_limit_no_trial_fits_in_stops_the_study_and_says_what_to_raise(
    tmp_path: Path,
) -> None:
    study = new_study()
    outcome = run_study(
        load_problem("torch", "llama3-8b", "dgx-h100:1"),
        study,
        ref=StudyRef("t", "memory", tmp_path),
        launcher=TimesOut(),
        progress=Quiet(),
        settings=SearchSettings(
            budget=Budget(trials=8, timeout_per_trial_s=10.0),
            calibration=DEFAULT_CALIBRATION["hopper"],
        ),
    )
    assert len(study.get_trials()) == 2
    assert outcome.stop_reason.startswith(
        "the first 2 trials all timed out at --timeout-per-trial"
    )
    assert "raise it" in outcome.stop_reason
