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
import os
import re
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.errors import InputError
from autotune.launchers import torchrun
from autotune.launchers.base import (
    LOG_FILE,
    ExportContext,
    Launcher,
    LaunchOutcome,
    LaunchRequest,
    LaunchSettings,
)
from autotune.launchers.slurm_accounting import (
    GRACE_S,
    Accounting,
    NoAccountingError,
    final_accounting,
    finished,
    is_running,
    job_state,
    read_id,
    slurm_call,
    slurm_error,
    slurm_outcome,
)
from autotune.launchers.slurm_export import TRAIN_SBATCH, train_sbatch
from autotune.launchers.slurm_scripts import (
    HEARTBEAT_FILE,
    ID_FILE,
    JOB_SCRIPT,
    NODES_FILE,
    STEP_SCRIPT,
    checked,
    job_script,
    resource_options,
    step_script,
)
from autotune.launchers.slurm_settings import SLURM_OPTIONS, SlurmSettings
from autotune.specs.cluster import Cluster
from autotune.trial.spec import LAUNCH_EPOCH_ENV

POLL_S = 1.0


RETRIED_KINDS = ("node_fail", "preempted")
"""Outcomes that say nothing of the config: the trial runs once more."""


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


class SlurmLauncher(Launcher):
    name = "slurm"
    settings_type = SlurmSettings
    options = SLURM_OPTIONS

    def __init__(self, settings: SlurmSettings | None = None, gpus: bool = False) -> None:
        self.settings = checked(settings or SlurmSettings())
        self.gpus = gpus
        self.allocation = in_allocation()
        self.accounting: bool = True
        """False once sacct said this cluster keeps none: later trials do not ask it."""
        submits = () if self.allocation else ("sbatch",)
        for command in (*submits, "srun", "sacct", "scancel", "squeue"):
            _require(command)

    @classmethod
    def build(cls, settings: LaunchSettings) -> SlurmLauncher:
        return cls(settings.of(cls), gpus=settings.gpus)

    @classmethod
    def export_files(cls, settings: Any, context: ExportContext) -> dict[str, str]:
        return {TRAIN_SBATCH: train_sbatch(settings, context)}

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
        slurm_call("sbatch", "--test-only", *options, *self.settings.options(), "--wrap", "true")

    def command(self, request: LaunchRequest) -> list[str]:
        options = resource_options(request, self.gpus, request.time_limit_s)
        if self.allocation:
            excluded = self.settings.exclusion()
            return ["srun", *options, *excluded, "--kill-on-bad-exit=1", "bash", STEP_SCRIPT]
        # A failed node's job ends as NODE_FAIL, to be run once more by `run`, not requeued
        # by SLURM under the same id.
        return [
            "sbatch", "--parsable", "--no-requeue", *options, *self.settings.options(), JOB_SCRIPT
        ]  # fmt: skip

    def keep_off(self, nodes: tuple[str, ...]) -> None:
        """Run no later trial on `nodes` (SLURM's `--exclude`, for jobs and steps alike)."""
        self.settings = replace(
            self.settings, exclude=tuple(sorted({*self.settings.exclude, *nodes}))
        )

    def ran_on(self, request: LaunchRequest) -> str | None:
        """The node list the trial's first node read from SLURM; None if it never ran."""
        path = request.folder / NODES_FILE
        return (path.read_text().strip() or None) if path.exists() else None

    def _write_scripts(self, request: LaunchRequest) -> None:
        step = request.folder / STEP_SCRIPT
        step.write_text(step_script(request))
        step.chmod(0o755)
        job = request.folder / JOB_SCRIPT
        job.write_text(job_script())
        job.chmod(0o755)

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        self._write_scripts(request)
        outcome = self._run_once(request)
        if outcome.kind in RETRIED_KINDS:
            with (request.folder / LOG_FILE).open("a") as log:
                log.write(f"autotune: {outcome.error}; running the trial once more\n")
            (request.folder / ID_FILE).unlink(missing_ok=True)
            (request.folder / NODES_FILE).unlink(missing_ok=True)
            retried = self._run_once(request)
            return replace(retried, queue_s=retried.queue_s + outcome.queue_s)
        return outcome

    def _run_once(self, request: LaunchRequest) -> LaunchOutcome:
        heartbeat = request.folder / HEARTBEAT_FILE
        heartbeat.touch()
        submitted = time.monotonic()
        started_job = self._start(request)
        if isinstance(started_job, LaunchOutcome):
            return started_job
        job, proc = started_job
        started, timed_out = self._wait(request, job, proc)
        if timed_out:
            self._cancel(job or read_id(request.folder), proc)
        ident = job or read_id(request.folder)
        end = time.monotonic()
        run_s = end - (started or end)
        accounting = self._accounting(ident, request.folder) if ident else None
        queue_s = (started or end) - submitted
        if accounting is not None and job is not None:
            queue_s = accounting.queue_s
        return slurm_outcome(request.folder, accounting, timed_out, run_s, queue_s, proc)

    def _accounting(self, ident: str, folder: Path) -> Accounting | None:
        """sacct's word on the trial's job or step; None, without waiting for it, once the
        cluster was found to keep no accounting (the outcome then comes from the trial's
        files and srun's exit status)."""
        if not self.accounting:
            return None
        try:
            return final_accounting(ident)
        except NoAccountingError as exc:
            self.accounting = False
            with (folder / LOG_FILE).open("a") as log:
                log.write(f"autotune: {exc}; trials read no SLURM accounting from now on\n")
            return None

    def _start(
        self, request: LaunchRequest
    ) -> tuple[str | None, subprocess.Popen[bytes] | None] | LaunchOutcome:
        """Start the trial: an srun step inside the allocation (its process), or an sbatch
        job (its id); a launch_error outcome when sbatch refuses it."""
        env = {
            **os.environ,
            "PATH": torchrun.python_bin_first(os.environ.get("PATH", "")),
            LAUNCH_EPOCH_ENV: repr(time.time()),
        }
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
            return None, proc
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
        return done.stdout.strip().split(";")[0], None

    def _wait(
        self, request: LaunchRequest, job: str | None, proc: subprocess.Popen[bytes] | None
    ) -> tuple[float | None, bool]:
        """Poll until the trial ends or outlives its time limit, touching its heartbeat:
        when it started running, and whether it timed out. Cancels it when interrupted."""
        heartbeat = request.folder / HEARTBEAT_FILE
        started: float | None = None
        try:
            while True:
                heartbeat.touch()
                state = job_state(job) if job is not None else None
                if started is None and is_running(state, request.folder):
                    started = time.monotonic()
                if finished(proc, state):
                    return started, False
                if started is not None and time.monotonic() - started > (
                    request.time_limit_s + GRACE_S
                ):
                    return started, True
                time.sleep(POLL_S)
        except BaseException:
            self._cancel(job or read_id(request.folder), proc)
            raise

    def _cancel(self, ident: str | None, proc: subprocess.Popen[bytes] | None) -> None:
        if ident:
            slurm_call("scancel", ident, check=False)
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
