"""Run an autotune command in a fresh process and read its own peak memory.

A child's rusage peak (`wait4`, GNU time run from Python) starts from its parent's size at the
fork, which a benchmark holding a large plan inflates; the kernel's VmHWM of the new process
after exec does not. So the command runs under a small stub that prints VmHWM at exit.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

STUB = """
import atexit, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("AUTOTUNE_PEAK_KB", line.split()[1], file=sys.stderr)
atexit.register(peak)
sys.argv = ["autotune", *sys.argv[1:]]
from autotune.cli.app import main
main()
"""


def run_measured(args: list[str], cwd: Path) -> tuple[float, float]:
    """(seconds, peak resident GiB) of `autotune ARGS`; raises if it fails."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", STUB, *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"autotune {' '.join(args)} failed: {done.stderr[-2000:]}")
    kib = next(
        int(line.split()[1])
        for line in done.stderr.splitlines()
        if line.startswith("AUTOTUNE_PEAK_KB")
    )
    return seconds, kib / 2**20
