"""Every registered framework, on a command of its own kind: recognised as that framework and
no other, parsed, narrowed to knobs its engine reads, and given a trial folder whose files and
command.json say what its ranks run; the export keeps the command and changes only the tuned
settings. A framework added to an engine without a sample here fails the first test."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.engines import FRAMEWORKS, get_framework
from autotune.engines.command import framework_for
from autotune.launchers import get_launcher
from autotune.launchers.base import LaunchSettings
from autotune.problem import Problem, load_problem
from autotune.runner import prepare
from autotune.trial.spec import COMMAND_FILE, StepPlan, read_command
from tests.engines.test_megatron_and_torchtitan_jobs import PRETRAIN
from tests.paths import TESTS

SCRIPTS = TESTS / "data" / "user_scripts"
TITAN_TOML = (
    "[training]\nlocal_batch_size = 2\nglobal_batch_size = 32\nseq_len = 2048\nsteps = 1000\n"
    "[parallelism]\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 1\n"
    "[model]\nname = 'llama3'\nflavor = '8B'\n"
)


@dataclass(frozen=True)
class Sample:
    """A command of one framework's kind, and the flags `autotune run` would get with it."""

    engine: str
    command: tuple[str, ...]
    cluster: str = "local:2"
    space: str | None = None
    may_drop: frozenset[str] = frozenset()
    """Flags of the command that a tuned config may leave out (a switch it turns off)."""


SAMPLES = {
    "deepspeed": Sample("deepspeed", ("ds_train.py", "--deepspeed_config", "ds_config.json")),
    "huggingface": Sample(
        "deepspeed",
        ("hf_train.py", "--output_dir", "out", "--per_device_train_batch_size", "4")
        + ("--deepspeed", "hf_ds_config.json"),
    ),
    "megatron": Sample(
        "megatron",
        tuple(PRETRAIN),
        cluster="dgx-h100:4",
        may_drop=frozenset({"--sequence-parallel", "--recompute-activations"}),
    ),
    "torchtitan": Sample(
        "torch", ("-m", "torchtitan.train", "--job.config_file", "llama3.toml"), "dgx-h100:2"
    ),
    "script": Sample("torch", ("plain_train.py", "--steps", "40"), space="plain_space.yaml"),
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's folder with every sample's files; the commands are given from there."""
    for source in SCRIPTS.iterdir():
        shutil.copy(source, tmp_path / source.name)
    (tmp_path / "pretrain_gpt.py").write_text("raise SystemExit('not run here')\n")
    (tmp_path / "llama3.toml").write_text(TITAN_TOML)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def problem_of(name: str, workdir: Path) -> Problem:
    sample = SAMPLES[name]
    space = str(workdir / sample.space) if sample.space else None
    return load_problem(sample.engine, "tiny", sample.cluster, space, sample.command)


def test_every_framework_has_a_sample_here() -> None:
    assert set(FRAMEWORKS) <= set(SAMPLES), "add a Sample for each new framework"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_command_is_recognised_as_its_framework_alone(name: str) -> None:
    sample = SAMPLES[name]
    assert framework_for(sample.engine, sample.command).name == name
    specific = [
        f.name
        for f in FRAMEWORKS.values()
        if f.engine == sample.engine and not f.fallback and f.recognises(sample.command)
    ]
    assert specific in ([], [name])


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_parsed_job_is_narrowed_to_knobs_its_engine_reads(name: str, workdir: Path) -> None:
    problem = problem_of(name, workdir)
    assert problem.job is not None and problem.job.framework == name
    assert problem.framework is get_framework(name)
    assert set(problem.space.values) <= problem.engine.knobs | {"tp", "pp"}
    assert problem.workload.global_batch_size > 0
    assert problem.enumerate().valid, "the narrowed space keeps a config that runs"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_trial_folder_says_what_its_ranks_run(name: str, workdir: Path, tmp_path: Path) -> None:
    problem = problem_of(name, workdir)
    framework = get_framework(name)
    config = problem.enumerate().valid[0]
    spec = problem.trial_spec(config, StepPlan())
    folder = tmp_path / "trial"
    launcher = get_launcher("local", LaunchSettings())
    request = prepare(spec, problem.engine, launcher, folder, time_limit_s=60)
    assert request.worker_module == framework.rank_module
    assert importlib.util.find_spec(framework.rank_module) is not None
    argv = read_command(folder)
    assert argv == json.loads((folder / COMMAND_FILE).read_text())
    for path in framework.write_files(spec, tmp_path):  # each file the command names is there
        if path.name in " ".join(argv):
            assert (folder / path.name).is_file()
    assert argv[: len(spec.user_job.command[:1])] == list(spec.user_job.command[:1])


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_export_keeps_the_users_command_with_the_tuned_settings(
    name: str, workdir: Path
) -> None:
    """Every flag the user gave is in the exported command, but for the tuned switches a
    config may turn off (`Sample.may_drop`); the script or module comes first."""
    sample = SAMPLES[name]
    problem = problem_of(name, workdir)
    spec = problem.trial_spec(problem.enumerate().valid[0], StepPlan())
    exported = get_framework(name).export_argv(spec, "best_config.json")
    start = 2 if sample.command[0] == "-m" else 1
    assert exported[:start] == list(sample.command[:start])
    given = {word.partition("=")[0] for word in sample.command if word.startswith("--")}
    kept = {word.partition("=")[0] for word in exported if word.startswith("--")}
    assert given - kept <= sample.may_drop


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_trial_reports_to_no_service_and_the_export_as_the_user_does(
    name: str, workdir: Path, tmp_path: Path
) -> None:
    """W&B's own switch is off in every trial's environment (its launch.sh says so), and the
    exported command's environment leaves it to the user."""
    problem = problem_of(name, workdir)
    spec = problem.trial_spec(problem.enumerate().valid[0], StepPlan())
    launcher = get_launcher("local", LaunchSettings())
    request = prepare(spec, problem.engine, launcher, tmp_path / "trial", time_limit_s=60)
    assert request.env["WANDB_MODE"] == "disabled"
    assert "WANDB_MODE=disabled" in (tmp_path / "trial" / "launch.sh").read_text()
    assert "WANDB_MODE" not in get_framework(name).export_environment("config.json")
