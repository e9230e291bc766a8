"""A finished trial's folder moved to where the study keeps its trials (the run that read a
user's model becomes their config's trial): its files follow it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from autotune import runner as trials
from autotune.launchers import LaunchOutcome, LaunchRequest
from autotune.launchers.base import classify
from autotune.launchers.local import LocalLauncher
from autotune.problem import load_problem
from autotune.space import TrainConfig
from autotune.trial.result import TrialResult
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


class WritesOnlyAnError(LocalLauncher):
    """A launch whose rank fails: it writes its error file and no result."""

    def command(self, request: LaunchRequest) -> list[str]:
        return ["true"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        since = time.time()
        (request.folder / "error-rank0.json").write_text(
            json.dumps({"kind": "crash", "time": since, "error": "RuntimeError: new"})
        )
        return classify(request.folder, 1, False, 0.1, since=since)


def test_a_trial_never_reads_the_result_a_previous_launch_left(tmp_path: Path) -> None:
    problem = load_problem("deepspeed", "tiny", "local:2")
    spec = problem.trial_spec(TrainConfig(dp=2), StepPlan())
    folder = tmp_path / "trials" / "0"
    folder.mkdir(parents=True)
    TrialResult(
        source="measured", step_time_s=2.0, tokens_per_s=1.0, tflops_per_device=0.1, mfu=None
    ).write(folder)  # from a study started over: fresh, not older than this launch
    (folder / "metrics.jsonl").write_text("{}\n")
    record = trials.run(spec, problem.engine, WritesOnlyAnError(), folder, time_limit_s=60)
    assert (record.kind, record.error, record.result) == ("crash", "RuntimeError: new", None)
    assert not (folder / "result.json").exists() and not (folder / "metrics.jsonl").exists()
    (aside,) = tmp_path.joinpath("trials").glob("0.stale-*")
    assert (aside / "result.json").exists() and (aside / "metrics.jsonl").exists()
