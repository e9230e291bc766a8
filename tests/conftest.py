"""Shared helpers: run the real `autotune` command and read what it wrote."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

DURATIONS_ENV = "AUTOTUNE_TEST_DURATIONS"
"""Where the slowest tests' durations are written (default: test-durations.md here)."""
SLOWEST = 30

# Everything a test starts (autotune, an exported train.sh, a SLURM job) finds this Python's
# tools first, as in an activated venv: DeepSpeed compiles its CPU ops with the ninja on PATH,
# and a system ninja of another version would rebuild them (2 minutes on 2 cores) each time
# the tests switched from one to the other.
os.environ["PATH"] = os.pathsep.join(
    filter(None, [str(Path(sys.executable).parent), os.environ.get("PATH")])
)


def autotune(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run `python -m autotune ARGS` as a user would, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def spawn_autotune(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `python -m autotune ARGS` in the background, in a session of its own (so that a
    test can signal it like a user's shell would), output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        preexec_fn=_interruptible,
    )


def _interruptible() -> None:
    """SIGINT as a user's shell leaves it: tests started in the background without job
    control (`nohup pytest &`) have it ignored, which the tuner would inherit, so that a
    test's Ctrl-C would never reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def tiny_cluster_file(tmp_path: Path) -> Path:
    """Four gloo processes on this CPU, whatever its core count (oversubscribed is fine)."""
    path = tmp_path / "cpu4.yaml"
    path.write_text(
        "name: cpu4\ndevices_per_node: 4\ndevice: cpu\nbackend: gloo\n"
        "intra_link: {bandwidth_gbps: 5, latency_us: 20}\n"
    )
    return path


def start_slurm(*args: str) -> None:
    """scripts/slurm.sh ARGS, as root; the test skips where it cannot run or fails."""
    if os.geteuid() != 0:
        pytest.skip("starting SLURM here needs root (scripts/slurm.sh)")
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm.sh"), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"SLURM could not start: {done.stderr.strip()[-500:]}")


@pytest.fixture(scope="session")
def slurm() -> None:
    """A running one-node SLURM (scripts/slurm.sh starts it, as root), or the test skips."""
    start_slurm()


TWO_NODES = {"SLURM_CONF": "/etc/slurm/autotune2n/slurm.conf"}
"""The environment that points SLURM's commands at the two-node cluster."""


@pytest.fixture(scope="session")
def slurm_nodes() -> dict[str, str]:
    """A running two-node SLURM, each node a network namespace of this host with its own
    address and slurmd (scripts/slurm.sh --nodes 2), beside the one-node cluster; or the test
    skips. The environment to run its commands with."""
    start_slurm("--nodes", "2")
    return TWO_NODES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Write the slowest tests of this run (setup, call and teardown together) as a Markdown
    table, for a person to read after CI, named for the tier run (`-m`); its path ends the
    summary."""
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                seconds[report.nodeid] = seconds.get(report.nodeid, 0.0) + report.duration
    if not seconds:
        return
    tier = re.sub(r"\W+", "-", terminalreporter.config.option.markexpr).strip("-")
    name = f"test-durations-{tier}.md" if tier else "test-durations.md"  # -m "not slow": -not-slow
    path = Path(os.environ.get(DURATIONS_ENV) or REPO / name)
    slowest = sorted(seconds.items(), key=lambda item: item[1], reverse=True)[:SLOWEST]
    lines = [
        f"# The {len(slowest)} slowest of {len(seconds)} tests",
        "",
        "| seconds | test |",
        "| ---: | --- |",
        *(f"| {s:.2f} | `{nodeid}` |" for nodeid, s in slowest),
    ]
    path.write_text("\n".join(lines) + "\n")
    terminalreporter.write_line(f"slowest tests: {path}")
