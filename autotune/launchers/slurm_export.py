"""train.sbatch: the exported config as a SLURM job, one task per node, each running train.sh
with the rendezvous on the job's first node. Submit it from best/: `sbatch train.sbatch`."""

from __future__ import annotations

import re

from autotune import shell
from autotune.launchers import torchrun
from autotune.launchers.base import ExportContext
from autotune.launchers.slurm_settings import SlurmSettings

TRAIN_SBATCH = "train.sbatch"


def train_sbatch(settings: SlurmSettings, context: ExportContext) -> str:
    """The job, sent where the cluster file's `slurm:` section sends jobs."""
    cluster = context.spec.cluster
    devices = (
        f"--gpus-per-node={cluster.devices_per_node}"
        if cluster.backend == "nccl"
        else f"--cpus-per-task={cluster.devices_per_node}"
    )
    options = [
        f"--job-name=autotune-{re.sub(r'[^A-Za-z0-9_.-]', '_', context.study_name)}",
        f"--nodes={cluster.nodes}",
        "--ntasks-per-node=1",
        devices,
        "--output=train-%j.log",
        *settings.options(),
    ]
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            *(shell.sbatch_line(option) for option in options),
            *context.banner,
            shell.comment(
                f"autotune: best config of study {context.study_name!r}, {context.name}, on "
                f"{cluster.name}. Add --time for your run; submit from this folder."
            ),
            "set -euo pipefail",
            'cd "${SLURM_SUBMIT_DIR:-.}"',
            torchrun.NODE_ADDRESS,
            'head=$(node_addr "$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)")',
            f'export RDZV_ENDPOINT="$head:{torchrun.RDZV_PORT}"',
            "exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 "
            "bash -c 'NODE_RANK=$SLURM_NODEID exec ./train.sh'",
            "",
        ]
    )
