"""`autotune run` with real trials: the loop, exports, resume after kill -9, Ctrl-C, faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest

from tests.conftest import autotune, spawn_autotune

pytestmark = pytest.mark.slow
STUDY = "tiny-local_2-deepspeed"
# Exact trial counts: enumeration order (the guided search may stop on its own before the
# budget), no confirmation trials, no trial stopped early. Those are tested on their own:
# tests/study/test_guided.py, test_confirm.py, test_trial_length.py, benchmarks/.
RUN = (
    "run",
    "--cluster",
    "local:2",
    "--measured-steps",
    "3",
    "--seed",
    "3",
    "--no-confirm",
    "--no-early-stop",
    "--sampler",
    "grid",
)


def trials_of(results: Path) -> list[optuna.trial.FrozenTrial]:
    storage = f"sqlite:///{results / STUDY / 'study.db'}"
    return optuna.load_study(study_name=STUDY, storage=storage).get_trials()


def leftovers(results: Path) -> list[str]:
    """Processes still working inside the results folder (torchrun or workers)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if str(results) in p.cwd() or any(str(results) in a for a in p.cmdline()):
                found.append(f"{p.pid} {' '.join(p.cmdline())}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_for(
    predicate,
    timeout: float,
    what: str,  # type: ignore[no-untyped-def]
    tuner: subprocess.Popen[str] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if tuner is not None and tuner.poll() is not None:
            out = tuner.stdout.read() if tuner.stdout else ""
            raise AssertionError(f"the tuner exited ({tuner.returncode}) before {what}:\n{out}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def start_tuner(results: Path, *extra: str) -> subprocess.Popen[str]:
    return spawn_autotune(*RUN, "--results", str(results), *extra)


def a_trial_is_running(results: Path, after_completed: int) -> bool:
    folders = (
        sorted((results / STUDY / "trials").glob("*"))
        if (results / STUDY / "trials").exists()
        else []
    )
    done = [f for f in folders if (f / "outcome.json").exists()]
    running = [
        f for f in folders if not (f / "outcome.json").exists() and (f / "metrics.jsonl").exists()
    ]
    return len(done) >= after_completed and bool(running)


TRAIN_SH_RUNS = 5


def test_three_trial_study_exports_files_that_run(tmp_path: Path) -> None:
    result = autotune(*RUN, "--trials", "3", "--results", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "best:" in result.stdout and "stopped: trial budget reached (3 trials)" in (
        result.stdout
    )
    table = json.loads(
        autotune("trials", "--study", STUDY, "--results", str(tmp_path), "--format", "json").stdout
    )
    assert len(table) == 3 and all(row["status"] == "complete" for row in table)
    speeds = [row["tokens_per_s"] for row in table]
    assert speeds == sorted(speeds, reverse=True)
    assert len({row["label"] for row in table}) == 3  # no config measured twice

    best = tmp_path / STUDY / "best"
    names = {p.name for p in best.iterdir()}
    assert {"ds_config.json", "train.sh", "nccl.env", "best.yaml", "trial.json"} <= names
    provenance = __import__("yaml").safe_load((best / "best.yaml").read_text())
    assert provenance["source"] == "measured"
    assert provenance["metrics"]["tokens_per_s"] == pytest.approx(speeds[0])
    assert provenance["provenance"]["versions"]["deepspeed"]

    check_deepspeed_accepts(best / "ds_config.json")
    env = {**os.environ, "TORCHRUN": str(Path(sys.executable).with_name("torchrun"))}
    # A DeepSpeed rank used to abort now and then at exit, after its result was written
    # (gloo threads of a leaked group against C++ static destructors): run it many times.
    for attempt in range(TRAIN_SH_RUNS):
        (best / "result.json").unlink(missing_ok=True)
        run = subprocess.run(
            ["bash", str(best / "train.sh")], capture_output=True, text=True, env=env, timeout=300
        )
        assert run.returncode == 0, (attempt, run.stderr[-3000:])
        assert json.loads((best / "result.json").read_text())["status"] == "ok"

    calibrated = autotune("calibrate", "--study", STUDY, "--results", str(tmp_path))
    assert calibrated.returncode == 0, calibrated.stderr
    assert (tmp_path / "calibration" / "local_2.json").is_file()
    assert (tmp_path / STUDY / "calibration.json").is_file()
    predicted = autotune(
        "estimate",
        "--cluster",
        "local:2",
        "--config",
        "zero=1,mbs=4",
        "--results",
        str(tmp_path),
        "--json",
    )
    assert json.loads(predicted.stdout)["calibration"].startswith("fitted")

    out = tmp_path / "exported"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    refused = autotune("export", "--study", STUDY, "--results", str(tmp_path), "--out", str(out))
    assert refused.returncode == 2 and "not empty" in refused.stderr
    assert (out / "keep.txt").read_text() == "mine"
    mine = autotune(
        "export", "--study", STUDY, "--results", str(tmp_path), "--out", str(out), "--force"
    )
    assert mine.returncode == 2 and "not exported by autotune" in mine.stderr
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    exported = autotune("export", "--study", STUDY, "--results", str(tmp_path), "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    (out / "keep.txt").write_text("mine, added to autotune's export")
    forced = autotune(
        "export", "--study", STUDY, "--results", str(tmp_path), "--out", str(out), "--force"
    )
    assert forced.returncode == 0 and (out / "ds_config.json").exists()
    assert not (out / "keep.txt").exists()


def check_deepspeed_accepts(path: Path, world_size: int = 2) -> None:
    """DeepSpeed's own config class parses the export, inside a process group of the tuned
    world size (it checks the batch split against it)."""
    script = path.parent / "check_ds_config.py"
    script.write_text(
        "import json, sys\n"
        "import deepspeed\n"
        "from deepspeed.runtime.config import DeepSpeedConfig\n"
        "deepspeed.init_distributed(dist_backend='gloo')\n"
        "c = DeepSpeedConfig(json.load(open(sys.argv[1])))\n"
        "rank = deepspeed.comm.get_rank()\n"
        "out = {'stage': c.zero_optimization_stage, 'batch': c.train_batch_size}\n"
        "open(f'{sys.argv[1]}.rank{rank}', 'w').write(json.dumps(out))\n"
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("torchrun")),
            "--standalone",
            "--nproc-per-node",
            str(world_size),
            str(script),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "DS_ACCELERATOR": "cpu"},
    )
    script.unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    cfg = json.loads(path.read_text())
    outputs = sorted(path.parent.glob(f"{path.name}.rank*"))
    parsed = [json.loads(p.read_text()) for p in outputs]
    for p in outputs:
        p.unlink()
    assert len(parsed) == world_size
    expected = {"stage": cfg["zero_optimization"]["stage"], "batch": cfg["train_batch_size"]}
    assert all(p == expected for p in parsed)


SLOW = ("--measured-steps", "250", "--precision", "0")
"""Trials of a few seconds each, even in a warm pool: long enough to be caught running."""


def test_kill_9_then_resume_loses_and_repeats_nothing(tmp_path: Path) -> None:
    tuner = start_tuner(tmp_path, "--trials", "3", *SLOW)
    wait_for(lambda: a_trial_is_running(tmp_path, after_completed=1), 240, "a second trial", tuner)
    before = {
        t.number: t.value
        for t in trials_of(tmp_path)
        if t.state == optuna.trial.TrialState.COMPLETE
    }
    os.kill(tuner.pid, signal.SIGKILL)
    tuner.wait(timeout=30)
    wait_for(lambda: not leftovers(tmp_path), 20, "the killed run's processes to go")

    again = autotune(*RUN, "--trials", "3", "--results", str(tmp_path))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "recorded as failed (interrupted)" in again.stdout
    trials = trials_of(tmp_path)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert {t.number: t.value for t in complete if t.number in before} == before
    assert len(complete) == 3
    assert len({t.user_attrs["config_key"] for t in complete}) == 3
    interrupted = [t for t in trials if t.user_attrs.get("kind") == "interrupted"]
    assert len(interrupted) == 1 and interrupted[0].state == optuna.trial.TrialState.FAIL
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    assert not leftovers(tmp_path)


def test_ctrl_c_stops_the_trial_within_seconds(tmp_path: Path) -> None:
    tuner = start_tuner(tmp_path, "--trials", "3", *SLOW)
    wait_for(
        lambda: a_trial_is_running(tmp_path, after_completed=0), 240, "a running trial", tuner
    )
    sent = time.monotonic()
    os.kill(tuner.pid, signal.SIGINT)
    tuner.wait(timeout=30)
    assert time.monotonic() - sent < 15
    assert tuner.returncode == 130
    assert not leftovers(tmp_path)
    trials = trials_of(tmp_path)
    interrupted = [t for t in trials if t.user_attrs.get("kind") == "interrupted"]
    assert len(interrupted) == 1 and interrupted[0].state == optuna.trial.TrialState.FAIL
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]


@pytest.mark.parametrize(
    ("fault", "kind", "error", "limit"),
    [
        ("crash", "crash", "RuntimeError: injected crash", "60s"),
        ("hang", "timeout", "killed at the time limit", "12s"),
        # One rank with an NCCL setting of its own: every rank names it, the trial fails.
        (
            "nccl_env",
            "launch_error",
            "NCCL_ALGO is Tree on rank 1 but the trial sets it unset",
            "60s",
        ),
    ],
)
def test_failed_trials_are_recorded_and_the_study_goes_on(
    tmp_path: Path, fault: str, kind: str, error: str, limit: str
) -> None:
    result = autotune(
        *RUN,
        "--trials",
        "2",
        "--timeout-per-trial",
        limit,
        "--results",
        str(tmp_path),
        env={"AUTOTUNE_INJECT_FAULT": fault},
    )
    # Every trial failed: the study is recorded, nothing is exported and the run exits 1.
    assert result.returncode == 1, result.stderr[-3000:]
    assert "no trial succeeded (2 failed)" in result.stdout
    ran = [t for t in trials_of(tmp_path) if t.state != optuna.trial.TrialState.WAITING]
    assert len(ran) == 2
    for t in ran:
        assert t.state == optuna.trial.TrialState.FAIL
        assert t.user_attrs["kind"] == kind and error in t.user_attrs["error"]
    assert f"failures: {kind} 2" in result.stdout
    assert not leftovers(tmp_path)


def test_bad_study_input_is_refused(tmp_path: Path) -> None:
    unknown = autotune("export", "--study", "nope", "--results", str(tmp_path))
    assert unknown.returncode == 2 and "no study 'nope'" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "nope").exists()
    bad_url = autotune(
        "run", "--storage", "postgresql://nobody@127.0.0.1:9/x", "--results", str(tmp_path)
    )
    assert bad_url.returncode == 2 and "cannot open storage" in bad_url.stderr
    assert len(bad_url.stderr.strip().splitlines()) == 1
    not_url = autotune("trials", "--study", "x", "--storage", "no-such-scheme://x")
    assert not_url.returncode == 2 and "cannot open storage" in not_url.stderr
