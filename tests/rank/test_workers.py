"""Several `autotune run` workers sharing one study on a real PostgreSQL server."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import optuna
import pytest

from tests.conftest import REPO, autotune, spawn_autotune

pytestmark = pytest.mark.slow
WORKER = (
    "run",
    "--cluster",
    "local:1",
    "--measured-steps",
    "3",
    "--study",
    "shared",
    "--no-confirm",
    "--no-early-stop",
    "--sampler",
    "grid",  # sharing is under test, not search: no convergence stop before the budget
)


@pytest.fixture(scope="module")
def server() -> str:
    started = subprocess.run(
        ["bash", str(REPO / "scripts/postgres.sh")], capture_output=True, text=True, timeout=120
    )
    if started.returncode != 0:
        pytest.skip(f"PostgreSQL could not start: {started.stderr.strip()}")
    return started.stdout.strip()


@pytest.fixture
def storage(server: str) -> str:
    """A fresh database for one test."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    base, _, _ = server.rpartition("/")
    admin = subprocess.run(
        ["psql", f"{base}/postgres", "-c", f"CREATE DATABASE {name}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert admin.returncode == 0, admin.stderr
    return f"{base}/{name}"


def start_worker(storage: str, results: Path, trials: int) -> subprocess.Popen[str]:
    return spawn_autotune(
        *WORKER, "--storage", storage, "--results", str(results), "--trials", str(trials)
    )


def completed_distinct(storage: str) -> tuple[list[optuna.trial.FrozenTrial], set[str]]:
    study = optuna.load_study(study_name="shared", storage=storage)
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    return study.get_trials(), {t.user_attrs["config_key"] for t in done}


def test_three_workers_never_measure_a_config_twice(storage: str, tmp_path: Path) -> None:
    workers = [start_worker(storage, tmp_path, trials=6) for _ in range(3)]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers), outputs
    trials, distinct = completed_distinct(storage)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) >= 6 and len(distinct) == len(complete)
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    # The export at the end sees every worker's trials: the best is the study's best.
    best = max(complete, key=lambda t: t.value)
    exported = (tmp_path / "shared" / "best" / "best.yaml").read_text()
    assert f"trial: {best.number}" in exported


def test_killing_a_worker_mid_trial_loses_nothing(storage: str, tmp_path: Path) -> None:
    budget = 4
    workers = [start_worker(storage, tmp_path, trials=budget) for _ in range(3)]
    pids = {w.pid: w for w in workers}
    victim = None
    deadline = time.monotonic() + 240
    while victim is None and time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            study = optuna.load_study(study_name="shared", storage=storage)
        except KeyError:
            continue
        for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
            pid = int(t.user_attrs.get("owner", "x:0:0").split(":")[1])
            folder = Path(t.user_attrs.get("folder", "/nonexistent"))
            if pid in pids and (folder / "metrics.jsonl").exists():
                victim = pids[pid]
                break
    assert victim is not None, "no worker got as far as a running trial"
    completed_before = {
        t.number for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    }
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    others = [w for w in workers if w is not victim]
    outputs = [w.communicate(timeout=600)[0] for w in others]
    assert all(w.returncode == 0 for w in others), outputs
    trials, distinct = completed_distinct(storage)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    states = [
        (
            t.number,
            t.state.name,
            t.user_attrs.get("kind"),
            t.user_attrs.get("error"),
            t.user_attrs.get("pruned_reason"),
        )
        for t in trials
    ]
    assert completed_before <= {t.number for t in complete}
    assert len(complete) >= budget and len(distinct) == len(complete), (states, outputs)
    killed = [t for t in trials if t.user_attrs.get("kind") == "interrupted"]
    assert len(killed) == 1 and killed[0].state == optuna.trial.TrialState.FAIL
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]


def test_a_study_refuses_another_engine_or_workload(storage: str, tmp_path: Path) -> None:
    common = (
        "--launcher",
        "simulate",
        "--cluster",
        "dgx-h100:1",
        "--study",
        "mixed",
        "--storage",
        storage,
        "--results",
        str(tmp_path),
        "--trials",
        "2",
    )
    first = autotune("run", "--engine", "torch", "--model", "llama3-8b", *common)
    assert first.returncode == 0, first.stderr
    other_engine = autotune("run", "--engine", "deepspeed", "--model", "llama3-8b", *common)
    assert other_engine.returncode == 2 and "another engine" in other_engine.stderr
    other_model = autotune("run", "--engine", "torch", "--model", "gpt-1.3b", *common)
    assert other_model.returncode == 2 and "another workload" in other_model.stderr
    unreachable = autotune(
        "run", "--storage", "postgresql://nobody@127.0.0.1:9/none", "--results", str(tmp_path)
    )
    assert unreachable.returncode == 2 and "cannot open storage" in unreachable.stderr
    assert len(unreachable.stderr.strip().splitlines()) == 1


def test_three_guided_workers_on_a_large_space_all_finish(storage: str, tmp_path: Path) -> None:
    """A worker that loses a claim to another must learn what the study has measured since,
    not propose the same config again forever (it once made PRUNED trials "config claimed by
    trial 15" until killed)."""
    args = (
        *("run", "--launcher", "simulate", "--engine", "megatron", "--model", "llama3-8b"),
        *("--cluster", "dgx-h100:2", "--trials", "12", "--study", "large"),
        *("--storage", storage, "--results", str(tmp_path)),
    )
    workers = [spawn_autotune(*args) for _ in range(3)]
    outputs = []
    for w in workers:
        try:
            outputs.append(w.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for other in workers:
                other.kill()
            pytest.fail("a worker did not finish its study")
    failed = [o[-6000:] for w, o in zip(workers, outputs, strict=True) if w.returncode != 0]
    assert not failed, "\n".join(failed)
    study = optuna.load_study(study_name="large", storage=storage)
    lost = Counter(
        t.user_attrs["claim"]
        for t in study.trials
        if "claimed by" in t.user_attrs.get("pruned_reason", "")
    )
    # Three workers proposing at once may each take the same config and each give way, once;
    # then the earliest of them proposes it alone while the others move on.
    assert not lost or max(lost.values()) <= len(workers), lost.most_common(3)
