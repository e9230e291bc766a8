"""A study's SQLite file shared by what else opens it: a lock held for seconds mid-run is
waited out, and two workers with one trial budget make exactly that many trials. Real
`autotune run` processes on the simulate launcher."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.study.record.trial_attrs import TrialAttrs
from tests.conftest import REPO, spawn_autotune

pytestmark = pytest.mark.slow
SIMULATED = (
    *("run", "--launcher", "simulate", "--engine", "megatron", "--model", "llama3-8b"),
    *("--cluster", "dgx-h100:2", "--study", "s", "--no-confirm"),
)


def study_of(results: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{results / 's' / 'study.db'}")


def test_a_lock_held_mid_run_is_waited_out(tmp_path: Path) -> None:
    db = tmp_path / "s" / "study.db"
    worker = spawn_autotune(*SIMULATED, "--trials", "20", "--results", str(tmp_path))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and worker.poll() is None:
        if db.exists() and _trials_in(db) >= 2:
            break
        time.sleep(0.05)
    assert worker.poll() is None, "the run ended before the lock could be taken"
    holder = sqlite3.connect(db, isolation_level=None, timeout=30)
    holder.execute("BEGIN EXCLUSIVE")
    taken = _trials_in_locked(holder)
    time.sleep(6)
    holder.execute("COMMIT")
    holder.close()
    output, _ = worker.communicate(timeout=300)
    assert worker.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "database is locked" not in output, output[-3000:]
    trials = study_of(tmp_path).get_trials()
    assert len(trials) > taken  # the run went on after the lock
    stuck = [t.number for t in trials if t.state in (TrialState.WAITING, TrialState.RUNNING)]
    assert not stuck, stuck


def _trials_in(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
    except sqlite3.Error:
        return 0


def _trials_in_locked(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])


SLOW_SIMULATE = (
    "import sys, time\n"
    "from autotune.launchers.simulate import SimulateLauncher\n"
    "run = SimulateLauncher.run\n"
    "def slow(self, request):\n"
    "    time.sleep(0.4)  # a trial that takes a while, so the two workers' trials overlap\n"
    "    return run(self, request)\n"
    "SimulateLauncher.run = slow\n"
    "from autotune.cli import main\n"
    "sys.argv[0] = 'autotune'\n"
    "main()\n"
)


def test_two_workers_share_one_trial_budget(tmp_path: Path) -> None:
    args = (*SIMULATED, "--trials", "10", "--sampler", "grid", "--results", str(tmp_path))
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", SLOW_SIMULATE, *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers), [o[-3000:] for o in outputs]
    ran = [t.number for t in study_of(tmp_path).get_trials() if TrialAttrs.of(t).config_key]
    assert len(ran) == 10, ran
