"""`tune`, the function behind `autotune run`, called from a script."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from autotune.errors import InputError
from autotune.problem import load_problem
from autotune.study import Budget
from autotune.tune import TuneSettings, tune
from tests.fakes import Quiet


def test_a_script_tunes_a_simulated_cluster_and_gets_launch_files(tmp_path: Path) -> None:
    lines: list[str] = []
    tuned = tune(
        load_problem("deepspeed", "tiny", "local:2"),
        TuneSettings(budget=Budget(trials=4), launcher="simulate", results=tmp_path, seed=0),
        Quiet(),
        lines.append,
    )
    assert tuned.outcome.ran >= 4 and tuned.ref.folder == tmp_path / tuned.ref.name
    exported = {p.name for p in tuned.exported}
    assert exported >= {"train.sh", "nccl.env"} and "train.sbatch" not in exported  # no SLURM
    assert tuned.report is not None and tuned.report.exists()
    assert lines and "tiny" in lines[0]


def test_a_simulated_run_warns_of_nothing(tmp_path: Path) -> None:
    """Optuna's notices about how autotune drives it (heartbeats outside Study.optimize,
    experimental storage features, importances of few trials) are no user's business: a
    script calling `tune` sees no warning either, not only the CLI."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tune(
            load_problem("deepspeed", "tiny", "local:2"),
            TuneSettings(budget=Budget(trials=6), launcher="simulate", results=tmp_path, seed=0),
            Quiet(),
            lambda line: None,
        )
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []


def test_a_users_command_is_refused_by_a_launcher_that_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import deepspeed\n")
    (tmp_path / "ds.json").write_text('{"train_batch_size": 16}')
    command = (str(tmp_path / "train.py"), "--deepspeed_config", str(tmp_path / "ds.json"))
    problem = load_problem("deepspeed", "tiny", "local:2", None, command)
    with pytest.raises(InputError, match="does not run anything"):
        tune(problem, TuneSettings(budget=Budget(), launcher="simulate"), Quiet())
