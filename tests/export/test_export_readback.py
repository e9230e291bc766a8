"""The exported train.sh of a tiny DeepSpeed job and of a tiny Hugging Face Trainer job, and
train.sbatch on the local SLURM, run for a few steps: DeepSpeed's engine, read back from
inside the run (tests/data/readback), holds the user's global batch, precision and optimizer
settings beside the tuned micro-batch and ZeRO stage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.export.best import export_best
from autotune.problem import load_problem
from autotune.space import TrainConfig
from autotune.study.record.storage import problem_attrs
from autotune.study.record.trial_attrs import launched_through
from tests.fakes import measured_study
from tests.paths import TESTS

pytestmark = pytest.mark.slow
SCRIPTS = TESTS / "data" / "user_scripts"
READBACK = TESTS / "data" / "readback"
OPTIMIZER = {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-6, "weight_decay": 0.1}
"""The user's optimizer settings, in the ds_config (DeepSpeed) or the flags (the Trainer)."""
DS_CONFIG = {
    "train_batch_size": 16,
    "train_micro_batch_size_per_gpu": 8,
    "optimizer": {"type": "AdamW", "params": OPTIMIZER},
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 0},
    "steps_per_print": 1000000,
}
HF_CONFIG = {
    **{key: "auto" for key in ("train_batch_size", "train_micro_batch_size_per_gpu")},
    "gradient_accumulation_steps": "auto",
    "optimizer": {"type": "AdamW", "params": dict.fromkeys(OPTIMIZER, "auto")},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 1},
}
HF_FLAGS = ["--learning_rate", "3e-4", "--adam_beta2", "0.95", "--adam_epsilon", "1e-6"]
HF_FLAGS += ["--weight_decay", "0.1", "--bf16", "--use_cpu", "--report_to", "none"]
TUNED = TrainConfig(dp=2, zero=2, mbs=2)
"""The winner exported: not the user's micro-batch or stage."""


def exported(workdir: Path, command: list[str], monkeypatch: pytest.MonkeyPatch) -> Path:
    """best/ of a study of `command` on SLURM whose winner is `TUNED`, as `autotune export`
    writes it (train.sbatch with the rest)."""
    monkeypatch.chdir(workdir)
    problem = load_problem("deepspeed", "tiny", "local:2", command=command)
    study = measured_study((TUNED, 100.0))
    for key, value in problem_attrs(problem).items():
        study.set_user_attr(key, value)
    launched_through(study, "slurm")
    export_best(study, workdir / "best")
    return workdir / "best"


def read_back(best: Path, folder: Path, *command: str) -> dict[str, Any]:
    """Run `command` (`bash train.sh`, `sbatch ...`) in `best` and read what rank 0's engine
    held; every rank's must be the same."""
    folder.mkdir()
    env = {
        **os.environ,
        "TORCHRUN": str(Path(sys.executable).with_name("torchrun")),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(READBACK), os.environ.get("PYTHONPATH")])),
        "READBACK_DIR": str(folder),
    }
    done = subprocess.run(command, cwd=best, capture_output=True, text=True, env=env, timeout=600)
    logs = "".join(path.read_text() for path in best.glob("train-*.log"))
    assert done.returncode == 0, (done.stdout + done.stderr + logs)[-3000:]
    held = [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert held[0] == held[1]
    return held[0]


def users_settings(held: dict[str, Any], precision: str) -> None:
    assert held["world_size"] == 2
    assert held["train_batch_size"] == 16  # the user's global batch
    assert (held["mbs"], held["gradient_accumulation_steps"], held["zero"]) == (2, 4, 2)
    assert held["precision"] == precision
    optimizer = held["optimizer"]
    assert optimizer["betas"] == pytest.approx(OPTIMIZER["betas"])
    assert {k: v for k, v in optimizer.items() if k != "betas"} == pytest.approx(
        {k: v for k, v in OPTIMIZER.items() if k != "betas"}
    )


@pytest.fixture
def deepspeed_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """best/ of a DeepSpeed script's study, whose user trains in bf16 with their own AdamW."""
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "ds_train.py").write_text((SCRIPTS / "ds_train.py").read_text())
    (workdir / "ds_config.json").write_text(json.dumps(DS_CONFIG))
    command = ["ds_train.py", "--steps", "3", "--deepspeed_config", "ds_config.json"]
    return exported(workdir, command, monkeypatch)


def test_the_exported_deepspeed_job_trains_the_users_settings(
    deepspeed_job: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Through train.sbatch on the local SLURM where it runs (its srun runs train.sh), else
    through train.sh."""
    try:
        request.getfixturevalue("slurm")
        command = ["sbatch", "--parsable", "--wait", "--time=10", "train.sbatch"]
    except pytest.skip.Exception:
        command = ["bash", "train.sh"]
    held = read_back(deepspeed_job, tmp_path / "held", *command)
    users_settings(held, "bf16")


def test_the_exported_trainer_job_trains_the_users_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "hf_train.py").write_text((SCRIPTS / "hf_train.py").read_text())
    (workdir / "hf_ds_config.json").write_text(json.dumps(HF_CONFIG))
    command = ["hf_train.py", "--output_dir", "out", "--max_steps", "3", *HF_FLAGS]
    command += ["--per-device-train-batch-size", "4", "--gradient_accumulation_steps=2"]
    best = exported(workdir, [*command, "--deepspeed", "hf_ds_config.json"], monkeypatch)
    held = read_back(best, tmp_path / "held", "bash", "train.sh")
    users_settings(held, "bf16")
