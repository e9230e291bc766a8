"""How a rank ended when it wrote no error of its own: torchrun's record of the first failure
(its "Root Cause" block: the rank, its exit code or signal, its pid), else the exit status a
pool's rank answered; and for a SIGKILL, whether the kernel's out-of-memory killer sent it.

A rank that ends with `os._exit(3)` was once recorded from torchrun's log as "got signal: 15"
(autotune's own SIGTERM to the other ranks), and a SIGKILL as a row of "=" signs."""

from __future__ import annotations

import re
import signal
import subprocess
from dataclasses import dataclass

from autotune.trial.spec import Outcome

_ROOT = re.compile(
    r"Root Cause \(first observed failure\):\s*\[\d+\]:.*?rank\s*:\s*(\d+).*?"
    r"exitcode\s*:\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?",
    re.S,
)


@dataclass(frozen=True)
class RankExit:
    """A rank's end: its exit code, negative for the signal that killed it."""

    code: int
    rank: int | None = None
    pid: int | None = None

    def named(self) -> tuple[Outcome, str]:
        """The outcome kind and the error in words."""
        who = f"rank {self.rank}" if self.rank is not None else "a rank"
        if self.code >= 0:
            return "crash", (
                f"{who} exited with code {self.code} and reported no error (the script's own "
                "exit: os._exit, or sys.exit outside the main thread)"
            )
        name = _signal_name(-self.code)
        if -self.code == signal.SIGKILL:
            if (line := oom_killed(self.pid)) is not None:
                return "oom", f"{who} was killed by the kernel's out-of-memory killer: {line}"
            return "crash", (
                f"{who} was killed by SIGKILL, as the kernel's out-of-memory killer does (its "
                "log could not tell: see dmesg)"
            )
        return "crash", f"{who} died of {name}"


def root_cause(log: str) -> RankExit | None:
    """torchrun's first observed failure, from its log; None where it printed none."""
    found = _ROOT.search(log)
    if found is None:
        return None
    rank, code, pid = found.groups()
    return RankExit(int(code), int(rank), int(pid) if pid else None)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def oom_killed(pid: int | None) -> str | None:
    """The kernel log's line that says it killed `pid` for memory; None where it has none or
    cannot be read (dmesg needs privileges on most hosts)."""
    if pid is None:
        return None
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    pattern = re.compile(rf"(Out of memory|oom-kill|Killed process) .*\b{pid}\b")
    lines = [line.strip() for line in done.stdout.splitlines() if pattern.search(line)]
    return lines[-1][:200] if lines else None
