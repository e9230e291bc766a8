"""SLURM: each trial an `sbatch` job, or an `srun` step inside the tuner's own allocation.

Either way one task per node runs torchrun with a c10d rendezvous on the first node, so no
ssh, pdsh or hostfile is involved. The launcher owns only its jobs and steps, and cancels
them by id: on its time limit, on early stop, on Ctrl-C, and (through a heartbeat file the
job watches) when the tuner dies. Outcomes come from SLURM's accounting (`sacct`) together
with the worker's result file; preempted and node-failed trials are run once more. Time in
the queue is recorded apart and does not count against the trial's limit.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from autotune import shell
from autotune.errors import InputError
from autotune.launchers import torchrun
from autotune.launchers.base import (
    LOG_FILE,
    Launcher,
    LaunchOutcome,
    LaunchRequest,
    LaunchSettings,
    classify,
)
from autotune.launchers.early_stop import measured_step_times
from autotune.specs.cluster import Cluster, SlurmSettings
from autotune.trialspec import LAUNCH_EPOCH_ENV, NCCL_TUNED, Outcome

STEP_SCRIPT = "slurm_step.sh"
"""Runs on every node of the trial (one SLURM task per node): torchrun for that node."""
JOB_SCRIPT = "slurm_job.sh"
"""The batch script of a submitted trial: the step script on every node, through srun."""
ID_FILE = "slurm_id"
"""JOBID or JOBID.STEPID of the running trial, written by its first node."""
HEARTBEAT_FILE = "tuner_heartbeat"
"""Touched by the tuner while it waits; a trial whose heartbeat goes stale cancels itself."""
HEARTBEAT_STALE_S = 30
RENDEZVOUS = torchrun.Rendezvous(endpoint='"$head:$port"', run_id='"$id"')
"""On the trial's first node, under the trial's SLURM id (the step script's shell variables)."""
POLL_S = 1.0
GRACE_S = 90.0
"""Past the trial's limit, how long SLURM gets to end it (TIMEOUT) before autotune cancels."""
RETRIED_KINDS = ("node_fail", "preempted")
"""Outcomes that say nothing of the config: the trial runs once more."""
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


def checked(settings: SlurmSettings) -> SlurmSettings:
    """Settings whose values can go into an sbatch script (no line breaks)."""
    for option in settings.options():
        shell.sbatch_line(option)
    return settings


def in_allocation() -> bool:
    return "SLURM_JOB_ID" in os.environ


def _require(command: str) -> str:
    path = shutil.which(command)
    if path is None:
        raise InputError(
            f"{command} is not on PATH: the slurm launcher needs SLURM's commands "
            "(sbatch, srun, squeue, sacct, scancel) on this machine"
        )
    return path


def _slurm(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
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


def step_script(request: LaunchRequest) -> str:
    """torchrun on this node, the rendezvous on the trial's first node. While it runs, the
    first node records the trial's SLURM id and cancels the trial if the tuner's heartbeat
    goes stale (the tuner was killed and cannot cancel it itself)."""
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            "set -euo pipefail",
            f"unset {' '.join(NCCL_TUNED)}",
            shell.exports(request.env),
            'id="$SLURM_JOB_ID${SLURM_STEP_ID:+.$SLURM_STEP_ID}"',
            'nodes="${SLURM_STEP_NODELIST:-$SLURM_JOB_NODELIST}"',
            'head=$(scontrol show hostnames "$nodes" | head -n 1)',
            f"port={torchrun.RDZV_PORT}",
            " ".join(
                [
                    shell.quote(torchrun.executable()),
                    *torchrun.options(request.nnodes, request.nprocs_per_node, RENDEZVOUS),
                    f"-m {shell.quote(request.worker_module)}",
                    f"{shell.quote(request.worker_file)} &",
                ]
            ),
            "pid=$!",
            'if [ "${SLURM_NODEID:-0}" = 0 ]; then',
            f'  echo "$id" > {ID_FILE}',
            '  while kill -0 "$pid" 2>/dev/null; do',
            f"    age=$(( $(date +%s) - $(stat -c %Y {HEARTBEAT_FILE} 2>/dev/null || echo 0) ))",
            f'    if [ "$age" -gt {HEARTBEAT_STALE_S} ]; then scancel "$id"; fi',
            "    sleep 2",
            "  done",
            "fi",
            'wait "$pid"',
            "",
        ]
    )


def resource_options(request: LaunchRequest, gpus: bool, time_limit_s: float) -> list[str]:
    """One task per node with its devices (GPUs, or cores for gloo processes), and the
    trial's limit as SLURM's own (in whole minutes, its unit), counted from the job's start."""
    minutes = max(1, math.ceil(time_limit_s / 60))
    devices = (
        [f"--gpus-per-node={request.nprocs_per_node}"]
        if gpus
        else [f"--cpus-per-task={request.nprocs_per_node}"]
    )
    return [
        f"--nodes={request.nnodes}",
        "--ntasks-per-node=1",
        *devices,
        f"--time={minutes}",
        "--job-name=autotune-trial",
        f"--output={request.folder.resolve() / LOG_FILE}",
        "--open-mode=append",
        f"--chdir={request.folder.resolve()}",
    ]


@dataclass(frozen=True, kw_only=True)
class Accounting:
    """What `sacct` says of a finished job or step."""

    state: str
    exit_code: int | None
    queue_s: float


class SlurmLauncher(Launcher):
    name = "slurm"

    def __init__(self, settings: SlurmSettings | None = None, gpus: bool = False) -> None:
        self.settings = checked(settings or SlurmSettings())
        self.gpus = gpus
        self.allocation = in_allocation()
        submits = () if self.allocation else ("sbatch",)
        for command in (*submits, "srun", "sacct", "scancel", "squeue"):
            _require(command)

    @classmethod
    def build(cls, settings: LaunchSettings) -> SlurmLauncher:
        return cls(settings.slurm, gpus=settings.gpus)

    def check(self, cluster: Cluster) -> None:
        """Refuse, before any trial, what SLURM would refuse or what cannot hold the layout."""
        nodes, devices_per_node = cluster.nodes, cluster.devices_per_node
        if self.allocation:
            job = os.environ["SLURM_JOB_ID"]
            have_nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
            per_node = _allocated_per_node(self.gpus)
            what = "GPUs" if self.gpus else "CPUs"
            if have_nodes < nodes or (per_node is not None and per_node < devices_per_node):
                raise InputError(
                    f"allocation {job} has {have_nodes} node(s) with {per_node} {what} each; "
                    f"the layout needs {nodes} node(s) with {devices_per_node}"
                )
            return
        probe = LaunchRequest(
            folder=Path.cwd(), worker_module="-", nprocs_per_node=devices_per_node, nnodes=nodes
        )
        options = [
            o
            for o in resource_options(probe, self.gpus, 60)
            if not o.startswith(("--output", "--chdir"))
        ]
        _slurm("sbatch", "--test-only", *options, *self.settings.options(), "--wrap", "true")

    def command(self, request: LaunchRequest) -> list[str]:
        options = resource_options(request, self.gpus, request.time_limit_s)
        if self.allocation:
            return ["srun", *options, "--kill-on-bad-exit=1", "bash", STEP_SCRIPT]
        return ["sbatch", "--parsable", *options, *self.settings.options(), JOB_SCRIPT]

    def _write_scripts(self, request: LaunchRequest) -> None:
        step = request.folder / STEP_SCRIPT
        step.write_text(step_script(request))
        step.chmod(0o755)
        job = request.folder / JOB_SCRIPT
        job.write_text(
            "#!/usr/bin/env bash\n# One task per node, each running slurm_step.sh.\n"
            f"exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash {STEP_SCRIPT}\n"
        )
        job.chmod(0o755)

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        self._write_scripts(request)
        outcome = self._run_once(request)
        if outcome.kind in RETRIED_KINDS:
            with (request.folder / LOG_FILE).open("a") as log:
                log.write(f"autotune: {outcome.error}; running the trial once more\n")
            (request.folder / ID_FILE).unlink(missing_ok=True)
            retried = self._run_once(request)
            return replace(retried, queue_s=retried.queue_s + outcome.queue_s)
        return outcome

    def _run_once(self, request: LaunchRequest) -> LaunchOutcome:
        heartbeat = request.folder / HEARTBEAT_FILE
        heartbeat.touch()
        env = {**os.environ, LAUNCH_EPOCH_ENV: repr(time.time())}
        submitted = time.monotonic()
        started: float | None = None
        proc: subprocess.Popen[bytes] | None = None
        if self.allocation:
            with (request.folder / LOG_FILE).open("ab") as log:  # srun's own messages
                proc = subprocess.Popen(
                    self.command(request),
                    cwd=request.folder,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            job = None
        else:
            done = subprocess.run(
                self.command(request), cwd=request.folder, env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                return LaunchOutcome(
                    kind="launch_error",
                    error=slurm_error(done.stderr) or f"sbatch exited with {done.returncode}",
                    wall_s=0.0,
                    returncode=done.returncode,
                )
            job = done.stdout.strip().split(";")[0]
        timed_out, stopped_early = False, None
        try:
            while True:
                heartbeat.touch()
                state = _job_state(job) if job is not None else None
                if started is None and _is_running(state, request.folder):
                    started = time.monotonic()
                if _finished(proc, state):
                    break
                if started is not None:
                    if time.monotonic() - started > request.time_limit_s + GRACE_S:
                        timed_out = True
                        break
                    if request.early_stop is not None:
                        stopped_early = request.early_stop.evidence(
                            measured_step_times(request.folder)
                        )
                        if stopped_early:
                            break
                time.sleep(POLL_S)
        except BaseException:
            self._cancel(job or _read_id(request.folder), proc)
            raise
        if timed_out or stopped_early:
            self._cancel(job or _read_id(request.folder), proc)
        ident = job or _read_id(request.folder)
        end = time.monotonic()
        run_s = end - (started or end)
        accounting = _accounting(ident) if ident else None
        queue_s = (started or end) - submitted
        if accounting is not None and job is not None:
            queue_s = accounting.queue_s
        return slurm_outcome(
            request.folder, accounting, timed_out, run_s, queue_s, stopped_early, proc
        )

    def _cancel(self, ident: str | None, proc: subprocess.Popen[bytes] | None) -> None:
        if ident:
            _slurm("scancel", ident, check=False)
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()  # srun cancels its step on SIGTERM
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


def _allocated_per_node(gpus: bool) -> int | None:
    """Devices per node of the tuner's allocation: the smallest node's CPUs ("4(x2),2" is
    SLURM's run-length form), or its GPUs where SLURM says."""
    if gpus:
        value = os.environ.get("SLURM_GPUS_ON_NODE")
        return int(value) if value and value.isdigit() else None
    counts = re.findall(r"(\d+)(?:\(x\d+\))?", os.environ.get("SLURM_JOB_CPUS_PER_NODE", ""))
    return min(int(c) for c in counts) if counts else None


def _read_id(folder: Path) -> str | None:
    path = folder / ID_FILE
    text = path.read_text().strip() if path.exists() else ""
    return text or None


def _is_running(state: str | None, folder: Path) -> bool:
    """A step runs once it wrote its id; a job once squeue says so."""
    return _read_id(folder) is not None or state in ("RUNNING", "COMPLETING")


def _job_state(job: str) -> str:
    """squeue's state of a job; empty once it has left the queue."""
    return _slurm("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()


def _finished(proc: subprocess.Popen[bytes] | None, state: str | None) -> bool:
    """An srun step when its client exits; a job when squeue no longer lists it running."""
    if proc is not None:
        return proc.poll() is not None
    return state in ("", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def _accounting(ident: str, wait_s: float = 30.0) -> Accounting | None:
    """sacct's final word on a job or step (the database may lag its end by a moment)."""
    deadline = time.monotonic() + wait_s
    while True:
        allocation_only = [] if "." in ident else ["-X"]  # a job's own line, not its steps
        done = _slurm(
            "sacct", "-j", ident, "-n", "-P", *allocation_only,
            "-o", "JobID,State,ExitCode,Submit,Start", check=False,
        )  # fmt: skip
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
    stopped_early: str | None,
    proc: subprocess.Popen[bytes] | None = None,
) -> LaunchOutcome:
    """The worker's files first (a result is a result), then what SLURM says ended the job."""
    state = accounting.state if accounting else None
    exit_code = accounting.exit_code if accounting else (proc.returncode if proc else None)
    base = classify(folder, exit_code, False, run_s, stopped_early)
    if base.kind in ("ok", "pruned"):
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
