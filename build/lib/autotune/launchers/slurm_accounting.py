"""What SLURM says of a trial: squeue while it runs, sacct once it ends, and the trial's
outcome from that and the worker's files."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from autotune.errors import InputError
from autotune.launchers.base import (
    LaunchOutcome,
    classify,
)
from autotune.launchers.slurm_scripts import ID_FILE
from autotune.trial.spec import Outcome

GRACE_S = 90.0
"""Past the trial's limit, how long SLURM gets to end it (TIMEOUT) before autotune cancels."""


FINAL_STATES = (
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "CANCELLED",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
)


def slurm_call(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        reason = slurm_error(done.stderr or done.stdout) or f"exit code {done.returncode}"
        raise InputError(f"{argv[0]} refused: {reason}")
    return done


def slurm_error(output: str) -> str | None:
    """SLURM's reason: the last line that says error or failure, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    named = [line for line in lines if "error" in line.lower() or "failure" in line.lower()]
    return (named or lines)[-1] if lines else None


@dataclass(frozen=True, kw_only=True)
class Accounting:
    """What `sacct` says of a finished job or step."""

    state: str
    exit_code: int | None
    queue_s: float


def read_id(folder: Path) -> str | None:
    path = folder / ID_FILE
    text = path.read_text().strip() if path.exists() else ""
    return text or None


def is_running(state: str | None, folder: Path) -> bool:
    """A step runs once it wrote its id; a job once squeue says so."""
    return read_id(folder) is not None or state in ("RUNNING", "COMPLETING")


def job_state(job: str) -> str:
    """squeue's state of a job; empty once it has left the queue."""
    return slurm_call("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()


def finished(proc: subprocess.Popen[bytes] | None, state: str | None) -> bool:
    """An srun step when its client exits; a job once squeue lists it in a final state (a
    node's failure too) or no more."""
    if proc is not None:
        return proc.poll() is not None
    return state == "" or state in FINAL_STATES


class NoAccountingError(RuntimeError):
    """This cluster keeps no accounting: sacct can never say how a job ended."""


NO_ACCOUNTING = "accounting storage is disabled"
"""What sacct says (exit 1) on a cluster whose AccountingStorageType is none."""


def final_accounting(ident: str, wait_s: float = 30.0) -> Accounting | None:
    """sacct's final word on a job or step (the database may lag its end by a moment);
    NoAccountingError at once where the cluster keeps no accounting."""
    deadline = time.monotonic() + wait_s
    while True:
        allocation_only = [] if "." in ident else ["-X"]  # a job's own line, not its steps
        done = slurm_call(
            "sacct", "-j", ident, "-n", "-P", *allocation_only,
            "-o", "JobID,State,ExitCode,Submit,Start", check=False,
        )  # fmt: skip
        said = f"{done.stderr}\n{done.stdout}"
        if done.returncode != 0 and NO_ACCOUNTING in said.lower():
            raise NoAccountingError(slurm_error(said) or NO_ACCOUNTING)
        for line in done.stdout.splitlines():
            job_id, state, exit_code, submit, start = (line.split("|") + [""] * 5)[:5]
            if job_id != ident:
                continue
            state = state.split()[0] if state else ""
            if state in FINAL_STATES:
                return Accounting(
                    state=state,
                    exit_code=int(exit_code.split(":")[0]) if exit_code else None,
                    queue_s=_seconds_between(submit, start),
                )
        if time.monotonic() > deadline:
            return None
        time.sleep(1.0)


def _seconds_between(submit: str, start: str) -> float:
    try:
        return max(
            0.0, (datetime.fromisoformat(start) - datetime.fromisoformat(submit)).total_seconds()
        )
    except ValueError:  # Unknown / None while it never started
        return 0.0


def slurm_outcome(
    folder: Path,
    accounting: Accounting | None,
    timed_out: bool,
    run_s: float,
    queue_s: float,
    proc: subprocess.Popen[bytes] | None = None,
) -> LaunchOutcome:
    """The worker's files first (a result is a result), then what SLURM says ended the job."""
    state = accounting.state if accounting else None
    exit_code = accounting.exit_code if accounting else (proc.returncode if proc else None)
    base = classify(folder, exit_code, False, run_s)
    if base.kind == "ok":
        return replace(base, queue_s=queue_s)
    kind: Outcome
    by_state: dict[str, tuple[Outcome, str]] = {
        "TIMEOUT": ("timeout", "SLURM ended the job at its time limit (TIMEOUT)"),
        "DEADLINE": ("timeout", "SLURM ended the job at its deadline (DEADLINE)"),
        "OUT_OF_MEMORY": ("oom", "SLURM ended the job for exceeding its memory (OUT_OF_MEMORY)"),
        "NODE_FAIL": ("node_fail", "a node of the job failed (NODE_FAIL)"),
        "BOOT_FAIL": ("node_fail", "a node of the job failed to boot (BOOT_FAIL)"),
        "PREEMPTED": ("preempted", "SLURM preempted the job (PREEMPTED)"),
    }
    if timed_out:
        kind, error = "timeout", f"cancelled by autotune {GRACE_S:.0f} s past the time limit"
    elif state in by_state:
        kind, error = by_state[state]
    elif state == "CANCELLED":
        kind, error = "cancelled", "the job was cancelled outside autotune (scancel)"
    else:
        return replace(base, queue_s=queue_s)
    return LaunchOutcome(
        kind=kind, error=error, wall_s=run_s, returncode=exit_code, queue_s=queue_s
    )
