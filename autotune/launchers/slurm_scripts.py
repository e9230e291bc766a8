"""What runs on a trial's nodes: the step and job scripts, and the resources they ask SLURM for."""

from __future__ import annotations

import math

from autotune import shell
from autotune.launchers import torchrun
from autotune.launchers.base import (
    LOG_FILE,
    LaunchRequest,
)
from autotune.launchers.slurm_settings import SlurmSettings
from autotune.trial.spec import NCCL_TUNED

STEP_SCRIPT = "slurm_step.sh"
"""Runs on every node of the trial (one SLURM task per node): torchrun for that node."""


JOB_SCRIPT = "slurm_job.sh"
"""The batch script of a submitted trial: the step script on every node, through srun."""


ID_FILE = "slurm_id"
"""JOBID or JOBID.STEPID of the running trial, written by its first node."""


NODES_FILE = "slurm_nodes"
"""The trial's node list as SLURM gives it (`at2n[1-2]`), written by its first node."""


HEARTBEAT_FILE = "tuner_heartbeat"
"""Touched by the tuner while it waits; a trial whose heartbeat goes stale cancels itself."""


HEARTBEAT_STALE_S = 30


RENDEZVOUS = torchrun.Rendezvous(
    endpoint='"$head:$port"', run_id='"$id"', local_addr='"$addr"', is_host='"$is_host"'
)
"""On the trial's first node's address, under the trial's SLURM id; each node gives its own
address (the step script's shell variables)."""


def checked(settings: SlurmSettings) -> SlurmSettings:
    """Settings whose values can go into an sbatch script (no line breaks)."""
    for option in settings.options():
        shell.sbatch_line(option)
    return settings


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
            torchrun.NODE_ADDRESS,
            'head=$(node_addr "$(scontrol show hostnames "$nodes" | head -n 1)")',
            'addr=$(node_addr "$SLURMD_NODENAME")',
            'is_host=$([ "${SLURM_NODEID:-0}" = 0 ] && echo 1 || echo 0)',
            f"port={torchrun.RDZV_PORT}",
            " ".join(
                [
                    shell.quote(torchrun.executable()),
                    *torchrun.options(request.nnodes, request.nprocs_per_node, RENDEZVOUS),
                    shell.join(torchrun.rank_words(request.worker_module)),
                    f"{shell.quote(request.worker_file)} &",
                ]
            ),
            "pid=$!",
            'if [ "${SLURM_NODEID:-0}" = 0 ]; then',
            f'  echo "$id" > {ID_FILE}',
            f'  echo "$nodes" > {NODES_FILE}',
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


def job_script() -> str:
    """The batch script of a submitted trial: the step script on every node, through srun."""
    return (
        "#!/usr/bin/env bash\n# One task per node, each running slurm_step.sh.\n"
        f"exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash {STEP_SCRIPT}\n"
    )
