"""The storage or the disk failing under a run ends it in one line that names the cause and
says resuming continues: once 32-164-line tracebacks whose last line was Optuna's "exceeding
max length"."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import autotune, spawn_autotune
from tests.paths import REPO

pytestmark = pytest.mark.slow

SIMULATE = [
    "run", "--launcher", "simulate", "--engine", "megatron", "--model", "llama3-8b",
    "--cluster", "dgx-h100:2", "--no-confirm", "--study", "s",
]  # fmt: skip


@pytest.fixture
def small_disk(tmp_path: Path) -> object:
    """A 400 KiB tmpfs (root only): a study fills it within a few hundred trials."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_under_the_study_is_one_line_and_keeps_what_was_told(
    small_disk: Path,
) -> None:
    done = autotune(*SIMULATE, "--trials", "300", "--results", str(small_disk / "res"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("autotune: error: the study's storage failed: ")
    assert "full" in lines[0] and "again to resume" in lines[0]
    listed = autotune("trials", "--study", "s", "--results", str(small_disk / "res"))
    assert listed.returncode == 0 and "dp=" in listed.stdout  # every trial told is there


SLOW_LOOP = """
import time
import torch.distributed as dist
from autotune import step

dist.init_process_group("gloo")
for _ in range(400):
    time.sleep(0.5)
    step.done(loss=1.0)
dist.destroy_process_group()
"""


def test_a_database_server_stopped_mid_run_is_one_line_and_the_study_resumes(
    tmp_path: Path,
) -> None:
    """A PostgreSQL server of this test's own, stopped while a trial runs."""
    port = "55497"
    data = Path(tempfile.mkdtemp(prefix="autotune-pg-fault-"))  # where postgres may go
    data.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
    env = {**os.environ, "AUTOTUNE_PG_PORT": port, "AUTOTUNE_PG_DATA": str(data)}
    started = subprocess.run(
        ["bash", str(REPO / "scripts/postgres.sh")], capture_output=True, text=True, env=env
    )
    if started.returncode != 0:
        pytest.skip(f"PostgreSQL could not start: {started.stderr.strip()}")
    url = started.stdout.strip()
    bin_dir = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    pg_ctl = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    pg_ctl += [str(bin_dir / "pg_ctl"), "-D", str(data)]
    (tmp_path / "slow.py").write_text(SLOW_LOOP)
    (tmp_path / "space.yaml").write_text("engine: torch\nknobs:\n  mbs: [1, 2]\n")
    args = [
        "run", "--engine", "torch", "--space", str(tmp_path / "space.yaml"), "--cluster",
        "local:2", "--trials", "2", "--no-confirm", "--results", str(tmp_path / "res"),
        "--study", "s", "--storage", url, "--users-config", "mbs=1", "--",
        str(tmp_path / "slow.py"),
    ]  # fmt: skip
    try:
        proc = spawn_autotune(*args)
        steps = tmp_path / "res" / "s" / "trials" / "0" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not steps.exists():
            time.sleep(0.2)
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], check=True, capture_output=True)
        out, _ = proc.communicate(timeout=300)
        lines = [line for line in out.splitlines() if line.startswith("autotune: ")]
        assert proc.returncode == 1, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        assert len(lines) == 1 and "the study's storage failed: " in lines[0], out[-3000:]
        assert "again to resume" in lines[0]
        subprocess.run(["bash", str(REPO / "scripts/postgres.sh")], env=env, check=True)
        resumed = autotune(*args, timeout=600)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(data, ignore_errors=True)
