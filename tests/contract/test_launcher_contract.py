"""The contract every registered launcher keeps, run against each of them (a new launcher
runs it for free once it has a way to fail below): a trial that runs comes back `ok` with step
times labelled by the launcher's source, in the trial folder; a trial that cannot run comes
back typed, with its cause; the launch script re-runs it by hand."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autotune.launchers import LAUNCHERS, LaunchSettings, get_launcher
from autotune.problem import load_problem
from autotune.runner import LAUNCH_SCRIPT, prepare
from autotune.space import TrainConfig
from autotune.trial.spec import FAULT_ENV, RESULT_FILE, StepPlan

pytestmark = pytest.mark.slow
RUNS = TrainConfig(dp=1, zero=0, mbs=2)
FAILURES: dict[str, tuple[dict[str, object], str, dict[str, str], str]] = {
    # launcher -> (config change, workload, environment, the outcome kind it must report)
    "local": ({}, "tiny", {FAULT_ENV: "crash"}, "crash"),
    "slurm": ({}, "tiny", {FAULT_ENV: "crash"}, "crash"),
    "simulate": ({}, "llama3-70b", {}, "oom"),  # 70B parameters on one CPU rank
    "replay": ({"mbs": 4}, "tiny", {}, "oom"),  # recorded as oom in the table
}


@pytest.fixture(params=sorted(LAUNCHERS))
def launcher_name(request: pytest.FixtureRequest) -> str:
    if request.param == "slurm":
        request.getfixturevalue("slurm")
    return str(request.param)


def settings(tmp_path: Path) -> LaunchSettings:
    table = tmp_path / "sweep.csv"
    table.write_text("dp,zero,mbs,step_time_s,status\n1,0,2,0.25,ok\n1,0,4,,oom\n")
    return LaunchSettings(flags={"replay": {"table": table}})


def launch(tmp_path: Path, name: str, config: TrainConfig, workload: str, env: dict[str, str]):
    launcher = get_launcher(name, settings(tmp_path))
    problem = launcher.narrow(load_problem("torch", workload, "local:1"))
    spec = problem.trial_spec(config, StepPlan(measured_steps=2))
    folder = tmp_path / "trial"
    request = prepare(spec, problem.engine, launcher, folder, time_limit_s=300)
    with launcher:
        outcome = launcher.run(dataclasses.replace(request, env={**request.env, **env}))
    return launcher, folder, outcome


def test_every_launcher_has_a_way_to_fail_in_this_suite() -> None:
    assert set(FAILURES) == set(LAUNCHERS)


def test_a_trial_that_runs_is_ok_and_labelled(tmp_path: Path, launcher_name: str) -> None:
    launcher, folder, outcome = launch(tmp_path, launcher_name, RUNS, "tiny", {})
    assert outcome.kind == "ok" and outcome.error is None
    assert outcome.result is not None and outcome.result.step_time_s > 0
    assert outcome.result.source == launcher.source
    written = json.loads((folder / RESULT_FILE).read_text())
    assert written["step_time_s"] == outcome.result.step_time_s
    assert (folder / LAUNCH_SCRIPT).read_text().strip().splitlines()[-1]


def test_a_trial_that_cannot_run_is_typed_with_its_cause(
    tmp_path: Path, launcher_name: str
) -> None:
    change, workload, env, kind = FAILURES[launcher_name]
    config = dataclasses.replace(RUNS, **change)  # type: ignore[arg-type]
    _, folder, outcome = launch(tmp_path, launcher_name, config, workload, env)
    assert outcome.kind == kind, (outcome, (folder / "log.txt").read_text()[-2000:])
    assert outcome.error and "\n" not in outcome.error
    assert outcome.result is None
