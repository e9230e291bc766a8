"""A build lock a killed op build left never stalls a trial: no process holds it, so it is
removed; one whose holder cannot be seen fails the trial within a minute with one line; one
a running build holds is left to it. Trials load the install's own compiled ops."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.launchers import get_launcher
from autotune.problem import load_problem
from autotune.rank import build_lock
from autotune.runner import prepare
from autotune.space import TrainConfig
from autotune.trial.spec import StepPlan


@pytest.fixture
def extensions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "torch_extensions"
    (root / "fused_adam").mkdir(parents=True)
    monkeypatch.setenv(build_lock.EXTENSIONS_ENV, str(root))
    return root


def test_a_lock_no_process_holds_is_removed_however_young(extensions: Path) -> None:
    lock = extensions / "fused_adam" / "lock"
    lock.touch()  # a build killed a moment ago: its process no longer holds the file
    start = time.monotonic()
    build_lock.settle()
    assert not lock.exists() and time.monotonic() - start < 5


def test_a_lock_a_running_build_holds_is_left_to_it(extensions: Path) -> None:
    lock = extensions / "fused_adam" / "lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os, time; os.open({str(lock)!r}, os.O_CREAT); time.sleep(60)",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while build_lock.holders(lock) != [holder.pid] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert build_lock.holders(lock) == [holder.pid]
        build_lock.settle(wait_s=1)
        assert lock.exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_whose_holder_cannot_be_seen_fails_with_one_line(
    extensions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = extensions / "fused_adam" / "lock"
    lock.touch()
    monkeypatch.setattr(build_lock, "holders", lambda _lock: None)
    with pytest.raises(build_lock.BuildLockError) as raised:
        build_lock.settle(wait_s=1)
    message = str(raised.value)
    assert "\n" not in message and str(lock) in message and f"rm {lock}" in message
    assert lock.exists()


@pytest.mark.slow
def test_a_deepspeed_trial_runs_past_a_stale_lock_in_the_install_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The install's compiled ops, with the lock a build killed mid-way leaves in each op's
    folder: the trial loads them and runs at once (it once waited on the lock for ever)."""
    installed = build_lock.install_folder()
    if installed is None or not (installed / "fused_adam").is_dir():
        pytest.skip("this install's ops are not built (scripts/setup.sh builds them)")
    root = tmp_path / "torch_extensions"
    shutil.copytree(installed, root, ignore=shutil.ignore_patterns("lock"))
    for op in root.iterdir():
        (op / "lock").touch()
    monkeypatch.setenv(build_lock.EXTENSIONS_ENV, str(root))
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    problem = load_problem("deepspeed", "tiny", "local:1")
    spec = problem.trial_spec(TrainConfig(dp=1, zero=1, mbs=2), StepPlan())
    launcher = get_launcher("local")
    with launcher:
        request = prepare(spec, problem.engine, launcher, tmp_path / "t", time_limit_s=120)
        outcome = launcher.run(request)
    assert outcome.kind == "ok", (outcome.kind, outcome.error)
    assert not list(root.glob("*/lock"))
    log = (tmp_path / "t" / "log.txt").read_text()
    assert "a build lock no process held" in log
    assert "Building extension module" not in log  # loaded, not compiled again
    assert os.environ[build_lock.EXTENSIONS_ENV] == str(root)
