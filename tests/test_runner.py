"""A finished trial's folder moved to where the study keeps its trials (the run that read a
user's model becomes their config's trial): its files follow it."""

from __future__ import annotations

import json
from pathlib import Path

from autotune import runner as trials
from autotune.launchers import LaunchRequest
from autotune.launchers.local import LocalLauncher
from autotune.problem import load_problem
from autotune.space import TrainConfig
from autotune.trial.spec import StepPlan


class NamesItsFolder(LocalLauncher):
    """A launcher whose command names the trial's folder, as SLURM's --chdir and --output do."""

    def command(self, request: LaunchRequest) -> list[str]:
        return ["submit", f"--chdir={request.folder.resolve()}"]


def test_a_moved_trial_relaunches_from_where_it_now_lies(tmp_path: Path) -> None:
    problem = load_problem("deepspeed", "tiny", "local:2")
    launcher = NamesItsFolder()
    spec = problem.trial_spec(TrainConfig(dp=2), StepPlan())
    probe = tmp_path / "model_probe" / "run-1"
    request = trials.prepare(spec, problem.engine, launcher, probe, time_limit_s=60)
    record = trials.TrialRecord(
        kind="ok", error=None, folder=probe, command=" ".join(launcher.command(request)),
        wall_s=1.0,
    )  # fmt: skip
    trial = tmp_path / "trials" / "0"
    moved = trials.moved(record, trial, problem.engine, launcher, time_limit_s=60)
    assert not probe.exists() and moved.folder == trial
    script = (trial / trials.LAUNCH_SCRIPT).read_text()
    assert f"--chdir={trial.resolve()}" in script and str(probe) not in script
    assert str(trial.resolve()) in moved.command
    assert json.loads((trial / trials.OUTCOME_FILE).read_text())["folder"] == str(trial)
