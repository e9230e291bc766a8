"""Hostile names and options reach the exported scripts as data: running them executes
nothing but the launch itself."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import optuna
import pytest

from autotune.engines import get_engine
from autotune.errors import InputError
from autotune.export.scripts import nccl_env_text, train_script
from autotune.launchers import LaunchSettings
from autotune.launchers.slurm import SlurmLauncher
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.trial.spec import TrialSpec, nccl_environment
from tests.fakes import sbatch_text


def hostile(canary: Path) -> list[str]:
    """Strings that run `touch CANARY` if a script ever lets the shell interpret them."""
    c = str(canary)
    return [
        f"a b $(touch {c})",
        f"`touch {c}`",
        f"x'; touch {c}; echo '",
        f'x"; touch {c}; echo "',
        f"x\ntouch {c}\n",
    ]


def fake_bin(folder: Path) -> Path:
    """srun runs its command, scontrol names one node, torchrun notes it was reached."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    scripts = {
        "srun": 'while [[ "$1" == --* ]]; do shift; done; exec "$@"',
        "scontrol": "echo node1",
        "torchrun": 'echo "$@" > reached',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/usr/bin/env bash\n{body}\n")
        path.chmod(0o755)
    return bin_dir


def test_hostile_names_and_options_execute_nothing(tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    for text in hostile(canary):
        single_line = text.replace("\n", " ")
        cluster = dataclasses.replace(
            load_cluster("local:2"),
            name=text,
            launcher_sections={
                "slurm": {
                    "partition": single_line,
                    "account": single_line,
                    "qos": single_line,
                    "extra_sbatch": [f"--comment={single_line}"],
                }
            },
        )
        spec = TrialSpec(
            engine="megatron",
            workload=dataclasses.replace(load_workload("tiny"), name=text),
            cluster=dataclasses.replace(cluster, backend="nccl"),
            config=TrainConfig(dp=2, nccl_algo=single_line),
        )
        study = optuna.create_study()
        study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={"tokens_per_s": 1.0}))
        trial = study.trials[0]
        best = tmp_path / "best"
        best.mkdir()
        engine = get_engine("megatron")
        engine.write_files(spec, best)
        (best / "train.sh").write_text(train_script(engine, spec, trial, text))
        (best / "train.sbatch").write_text(sbatch_text(spec, trial, text))
        (best / "nccl.env").write_text(nccl_env_text(nccl_environment(spec), spec, trial))
        (best / "train.sh").chmod(0o755)
        bin_dir = fake_bin(tmp_path)
        env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "TORCHRUN": str(bin_dir / "torchrun"),
            "SLURM_JOB_ID": "7",
            "SLURM_NODEID": "0",
            "SLURM_JOB_NODELIST": "node1",
            "SLURM_SUBMIT_DIR": str(best),
        }
        for script in ("train.sbatch", "train.sh"):
            done = subprocess.run(
                ["bash", script], cwd=best, env=env, capture_output=True, text=True
            )
            assert done.returncode == 0, (text, script, done.stderr)
        assert (best / "reached").exists(), text  # the scripts ran through to the launch
        grep = subprocess.run(
            ["bash", "-c", 'set -a; source ./nccl.env; echo "$NCCL_ALGO"'],
            cwd=best,
            capture_output=True,
            text=True,
        )
        assert grep.stdout.removesuffix("\n") == single_line
        assert not canary.exists(), f"{text!r} was executed"
        for path in (best, bin_dir):
            subprocess.run(["rm", "-rf", str(path)], check=True)


def test_a_line_break_in_an_sbatch_option_is_refused() -> None:
    cluster = dataclasses.replace(
        load_cluster("local:2"), launcher_sections={"slurm": {"partition": "debug\ntouch /tmp/x"}}
    )
    spec = TrialSpec(
        engine="deepspeed", workload=load_workload("tiny"), cluster=cluster, config=TrainConfig()
    )
    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(value=1.0))
    with pytest.raises(InputError, match="line breaks"):
        sbatch_text(spec, study.trials[0], "s")


def test_cluster_file_slurm_section_reaches_the_job_options(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "devices_per_node: 8\ndevice: h100-sxm\nintra_link: {bandwidth_gbps: 450, latency_us: 1}\n"
        "slurm: {partition: gpu, account: ml, extra_sbatch: ['--exclusive']}\n"
    )
    settings = LaunchSettings(cluster=load_cluster(str(path))).of(SlurmLauncher)
    assert settings.options() == ["--partition=gpu", "--account=ml", "--exclusive"]
