"""A SLURM cluster that keeps no accounting: sacct fails at once there, and the launcher
asks it once, not for 30 s after every trial. SLURM's commands are fakes on PATH."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autotune.launchers.base import LOG_FILE, LaunchRequest
from autotune.launchers.slurm import SlurmLauncher
from autotune.launchers.slurm_accounting import NoAccountingError, final_accounting

FAKES = {
    "sbatch": 'echo "4242;cluster"',
    "squeue": "exit 0",  # the job has left the queue
    "srun": "exit 0",
    "scancel": "exit 0",
    # As sacct answers where slurm.conf has AccountingStorageType=accounting_storage/none
    "sacct": (
        'echo called >> "$(dirname "$0")/sacct.calls"\n'
        'echo "sacct: error: Slurm accounting storage is disabled" >&2\nexit 1'
    ),
}


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return bin_dir / "sacct.calls"


def test_sacct_without_accounting_is_known_at_once(fake_slurm: Path) -> None:
    start = time.monotonic()
    with pytest.raises(NoAccountingError, match="accounting storage is disabled"):
        final_accounting("4242")
    assert time.monotonic() - start < 5


def test_the_launcher_asks_sacct_once_then_never_waits_on_it(
    fake_slurm: Path, tmp_path: Path
) -> None:
    launcher = SlurmLauncher()
    walls = []
    for n in range(3):
        folder = tmp_path / f"t{n}"
        folder.mkdir()
        start = time.monotonic()
        outcome = launcher.run(LaunchRequest(folder=folder, worker_module="-", nprocs_per_node=1))
        walls.append(time.monotonic() - start)
        assert outcome.kind != "ok"  # no result.json: the fake job did nothing
    assert fake_slurm.read_text().splitlines() == ["called"]
    assert max(walls) < 10, walls
    assert "accounting storage is disabled" in (tmp_path / "t0" / LOG_FILE).read_text()
