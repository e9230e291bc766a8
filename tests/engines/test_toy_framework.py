"""A new framework is one class registered with its engine: a toy one, defined here and in no
other file, has its command parsed, its trials launched by the local launcher, and its export
written and run."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from autotune.engines import FRAMEWORKS
from autotune.engines.framework import Framework, JobProblem, with_workload
from autotune.launchers import LaunchSettings
from autotune.problem import load_problem
from autotune.study import Budget
from autotune.trial.spec import COMMAND_FILE, TrialSpec, UserJob, read_command
from autotune.tune import TuneSettings, tune
from tests.fakes import Quiet

pytestmark = pytest.mark.slow

TOY_SCRIPT = '''\
"""Takes its micro-batch as a flag and tells autotune of each optimizer step."""
import argparse
import torch
import torch.distributed as dist
from autotune import step

parser = argparse.ArgumentParser()
parser.add_argument("--micro-batch", type=int, default=1)
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()
dist.init_process_group("gloo")
model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(args.steps):
    model(torch.randn(args.micro_batch * 8, 64)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    step.done()
if dist.get_rank() == 0:
    print(f"toy trained {args.steps} steps with micro-batch {args.micro_batch}")
dist.destroy_process_group()
'''
TOY_SPACE = "engine: torch\nknobs:\n  mbs: [1, 2, 4]\n"


class FlagsFramework(Framework):
    """A toy: a script named toy_*.py takes the micro-batch as `--micro-batch N`."""

    name = "toy_flags"
    engine = "torch"
    rank_module = "autotune.engines.torch.script_worker"  # the step helper's measuring rank

    def recognises(self, command: Sequence[str]) -> bool:
        return Path(command[0]).name.startswith("toy_")

    def narrow(self, job: UserJob, problem: JobProblem) -> JobProblem:
        return with_workload(problem, problem.workload, frozenset({"mbs"}))

    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        return []

    def trial_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        return [*spec.user_job.command, "--micro-batch", str(spec.config.mbs)]


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setitem(FRAMEWORKS, FlagsFramework.name, FlagsFramework())
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "toy_train.py").write_text(TOY_SCRIPT)
    (workdir / "space.yaml").write_text(TOY_SPACE)
    monkeypatch.chdir(workdir)
    return workdir


def test_a_toy_framework_is_tuned_end_to_end(toy: Path, tmp_path: Path) -> None:
    command = ["toy_train.py", "--steps", "40"]
    problem = load_problem("torch", "tiny", "local:2", str(toy / "space.yaml"), command)
    assert problem.job is not None and problem.job.framework == "toy_flags"
    settings = TuneSettings(
        budget=Budget(trials=3), launch=LaunchSettings(), results=tmp_path / "results"
    )
    tuned = tune(problem, settings, Quiet())
    trials = sorted((tuned.ref.folder / "trials").iterdir())
    assert len(trials) >= 2
    for folder in trials:
        argv = read_command(folder)
        assert argv[:3] == command and argv[3] == "--micro-batch"
        assert (folder / COMMAND_FILE).is_file() and (folder / "result.json").is_file()
    train = tuned.ref.folder / "best" / "train.sh"
    assert "toy_train.py --steps 40 --micro-batch" in train.read_text()
    env = {**os.environ, "TORCHRUN": str(Path(sys.executable).with_name("torchrun"))}
    run = subprocess.run(
        ["bash", str(train)], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "toy trained 40 steps with micro-batch" in run.stdout + run.stderr
