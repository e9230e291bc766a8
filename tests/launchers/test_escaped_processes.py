"""Every process a trial starts ends with the trial: a user's command that leaves a child
running in a session of its own (`setsid`, or a fork, `setsid` and a fork) once kept it
running after the trial and after autotune exited (on a GPU node, holding device memory into
later trials)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from autotune.trial.spec import TRIAL_ENV
from tests.conftest import autotune

pytestmark = pytest.mark.slow

SCRIPT = """
import os, subprocess
import torch.distributed as dist
from autotune import step

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    subprocess.Popen(["setsid", "sleep", "6007"])
    if os.fork() == 0:  # a daemon: fork, a session of its own, fork again
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "6011"])
        os._exit(0)
for _ in range(40):
    step.done(loss=1.0)
dist.destroy_process_group()
"""


def left_by(root: Path) -> list[psutil.Process]:
    """The script's sleepers, or any process of a trial under `root`, still running."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            ours = p.environ().get(TRIAL_ENV, "").startswith(str(root))
            if ours or p.info["cmdline"] in (["sleep", "6007"], ["sleep", "6011"]):
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_a_trials_detached_children_are_stopped_and_named(tmp_path: Path) -> None:
    (tmp_path / "daemon.py").write_text(SCRIPT)
    (tmp_path / "space.yaml").write_text("engine: torch\nknobs:\n  mbs: [1, 2]\n")
    done = autotune(
        "run", "--engine", "torch", "--space", "space.yaml", "--cluster", "local:2",
        "--trials", "1", "--no-confirm", "--results", "res", "--study", "s",
        "--users-config", "mbs=1", "--", "daemon.py",
        cwd=tmp_path, timeout=600,
    )  # fmt: skip
    left = left_by(tmp_path)
    for p in left:  # so that a failure here leaks nothing into the next tests
        p.kill()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert left == []
    assert "left processes running, stopped after it: sleep (pid" in done.stdout
