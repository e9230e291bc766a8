"""The slurm launcher on a real one-node SLURM (scripts/slurm.sh starts it, as root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.launchers.slurm_accounting import final_accounting
from tests.conftest import REPO, autotune, spawn_autotune

pytestmark = pytest.mark.slow
STUDY = (
    "--cluster",
    "local:1",
    "--sampler",
    "grid",
    "--no-confirm",
    "--no-early-stop",
    "--measured-steps",
    "3",
    "--study",
    "s",
)


def sacct_state(ident: str) -> str:
    """sacct's final state, waiting as the launcher does: the database lags a job's end."""
    accounting = final_accounting(ident, wait_s=60.0)
    return accounting.state if accounting else ""


def job_ids(results: Path) -> list[str]:
    """The SLURM job of every trial folder that got as far as running."""
    return [
        (f / "slurm_id").read_text().strip().split(".")[0]
        for f in sorted((results / "s" / "trials").iterdir())
        if (f / "slurm_id").exists()
    ]


def table(results: Path) -> list[dict[str, object]]:
    done = autotune("trials", "--study", "s", "--results", str(results), "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def first_trial_id(results: Path) -> Path:
    """The id file of the study's first trial, once its job or step runs."""
    path = results / "s" / "trials" / "0" / "slurm_id"
    deadline = time.monotonic() + 300
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert path.exists(), "the first trial never started"
    return path


def in_queue(job: str) -> bool:
    done = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True)
    return bool(done.stdout.strip())


def test_submitted_study_tabulates_like_local_and_its_sbatch_export_trains(
    slurm: None, tmp_path: Path
) -> None:
    for launcher in ("slurm", "local"):
        done = autotune(
            "run", *STUDY, "--launcher", launcher, "--trials", "1",
            "--results", str(tmp_path / launcher),
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    slurm_rows, local_rows = table(tmp_path / "slurm"), table(tmp_path / "local")
    assert [r["kind"] for r in slurm_rows] == ["ok"]
    assert {r["label"] for r in slurm_rows} == {r["label"] for r in local_rows}
    assert [list(r) for r in slurm_rows] == [list(r) for r in local_rows]
    jobs = job_ids(tmp_path / "slurm")
    assert len(jobs) == 1 and all(sacct_state(j) == "COMPLETED" for j in jobs)

    best = tmp_path / "slurm" / "s" / "best"
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    done = subprocess.run(
        ["sbatch", "--parsable", "--wait", "--time=10", "train.sbatch"],
        cwd=best,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TORCHRUN": torchrun},
    )
    assert done.returncode == 0, done.stderr + "".join(
        p.read_text() for p in best.glob("train-*.log")
    )
    job = done.stdout.strip().split(";")[0]
    assert sacct_state(job) == "COMPLETED"
    assert (best / "result.json").exists()  # the worker trained the best config there


def test_allocation_mode_runs_each_trial_as_a_step(slurm: None, tmp_path: Path) -> None:
    done = subprocess.run(
        ["salloc", "--nodes=1", "--ntasks=1", "--cpus-per-task=2", sys.executable, "-m",
         "autotune", "run", *STUDY, "--launcher", "slurm", "--trials", "2",
         "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=1200, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert [r["kind"] for r in table(tmp_path)] == ["ok"] * 2
    steps = [(f / "slurm_id").read_text().strip() for f in (tmp_path / "s" / "trials").iterdir()]
    assert len({s.split(".")[0] for s in steps}) == 1  # one allocation, a step per trial
    assert all("." in s and sacct_state(s) == "COMPLETED" for s in steps)


def test_hand_cancelled_trial_is_cancelled_and_one_past_its_limit_is_timeout(
    slurm: None, tmp_path: Path
) -> None:
    tuner = spawn_autotune(
        "run", *STUDY, "--launcher", "slurm", "--trials", "2", "--timeout-per-trial", "1m",
        "--results", str(tmp_path), env={"AUTOTUNE_INJECT_FAULT": "hang"},
    )  # fmt: skip
    first = first_trial_id(tmp_path)
    time.sleep(5)
    subprocess.run(["scancel", first.read_text().strip().split(".")[0]], check=True)
    output = tuner.communicate(timeout=900)[0]
    assert tuner.returncode == 1, output  # both failed: nothing to export
    kinds = [r["kind"] for r in sorted(table(tmp_path), key=lambda r: r["number"])]
    assert kinds == ["cancelled", "timeout"], output


def test_killing_the_tuner_leaves_none_of_its_jobs_queued(slurm: None, tmp_path: Path) -> None:
    tuner = spawn_autotune(
        "run", *STUDY, "--launcher", "slurm", "--trials", "1", "--results", str(tmp_path),
        env={"AUTOTUNE_INJECT_FAULT": "hang"},
    )  # fmt: skip
    first = first_trial_id(tmp_path)
    job = first.read_text().strip().split(".")[0]
    os.killpg(tuner.pid, signal.SIGKILL)
    tuner.wait(timeout=30)
    deadline = time.monotonic() + 120
    while in_queue(job) and time.monotonic() < deadline:
        time.sleep(2)
    assert not in_queue(job), f"job {job} outlived its tuner"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (("--partition", "nosuch"), "Invalid partition"),
        (("--account", "nosuch"), "Invalid account"),
    ],
)
def test_what_slurm_refuses_is_one_line_before_any_trial(
    slurm: None, tmp_path: Path, extra: tuple[str, ...], reason: str
) -> None:
    done = autotune("run", *STUDY, "--launcher", "slurm", *extra, "--results", str(tmp_path))
    assert done.returncode == 2
    assert reason in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "s" / "trials").exists()


def test_missing_sbatch_and_a_small_allocation_are_one_line(slurm: None, tmp_path: Path) -> None:
    bare = autotune(
        "run", *STUDY, "--launcher", "slurm", "--results", str(tmp_path),
        env={"PATH": str(Path(sys.executable).parent)},
    )  # fmt: skip
    assert bare.returncode == 2 and "sbatch is not on PATH" in bare.stderr, bare.stderr
    small = subprocess.run(
        ["salloc", "--nodes=1", "--ntasks=1", "--cpus-per-task=1", sys.executable, "-m",
         "autotune", "run", "--launcher", "slurm", "--cluster", "local:2",
         "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert small.returncode == 2, small.stdout + small.stderr
    line = [x for x in small.stderr.splitlines() if "allocation" in x and "layout" in x]
    assert line, small.stderr


def test_commbench_runs_as_a_slurm_job(tmp_path: Path, slurm: None) -> None:
    done = autotune(
        "commbench", "--launcher", "slurm", "--cluster", "local:2", "--sizes", "1K:64K",
        "--ops", "all_reduce,broadcast", "--results", str(tmp_path), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {r["op"] for r in report["rows"]} == {"all_reduce", "broadcast"}
    assert all(r["correct"] and r["ranks"] == 2 for r in report["rows"])
    job = (Path(report["folder"]) / "slurm_id").read_text().strip().split(".")[0]
    assert sacct_state(job) == "COMPLETED"
