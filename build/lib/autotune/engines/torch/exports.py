"""The torch engine's file for a config: its parallel plan in the words a torchtitan user
reads (torch_parallel.yaml)."""

from __future__ import annotations

from pathlib import Path

import yaml

from autotune.trial.spec import TrialSpec

PARALLEL_FILE = "torch_parallel.yaml"


def write_parallel_file(spec: TrialSpec, folder: Path) -> Path:
    path = folder / PARALLEL_FILE
    path.write_text(yaml.safe_dump(parallel_settings(spec), sort_keys=False))
    return path


def parallel_settings(spec: TrialSpec) -> dict[str, object]:
    """The torch engine's parallel plan in words a torchtitan user reads: what wraps what."""
    c = spec.config
    data_parallel = {
        0: "DDP",
        1: "DDP + ZeroRedundancyOptimizer",
        2: "FSDP2 fully_shard(reshard_after_forward=False)",
        3: "FSDP2 fully_shard(reshard_after_forward=True)",
    }[c.zero]
    schedule = (
        "none" if c.pp == 1 else ("Schedule1F1B" if c.vpp == 1 else "ScheduleInterleaved1F1B")
    )
    mesh: dict[str, int] = {"pp": c.pp, "dp": c.dp, "tp": c.tp}
    if c.cp > 1:
        mesh = {"dp": c.dp, "cp": c.cp}
        data_parallel = f"{data_parallel} over the flattened (dp, cp) mesh"
    if c.hsdp > 1:
        mesh = {"pp": c.pp, "dp_replicate": c.hsdp, "dp_shard": c.dp // c.hsdp, "tp": c.tp}
        data_parallel = f"HSDP: {data_parallel} over the (dp_replicate, dp_shard) mesh"
    return {
        "mesh": mesh,
        "data_parallel": data_parallel if c.dp * c.cp > 1 else "none",
        "ddp_bucket_cap_mb": c.ddp_bucket_mb,
        "tensor_parallel": {"degree": c.tp, "sequence_parallel": c.sp},
        **(
            {"context_parallel": {"degree": c.cp, "buffers": "tokens and labels, seq dim 1"}}
            if c.cp > 1
            else {}
        ),
        "pipeline": {
            "degree": c.pp,
            "virtual_stages": c.vpp,
            "schedule": schedule,
            "microbatches": c.grad_accum(spec.workload.global_batch_size),
        },
        "micro_batch_size": c.mbs,
        "activation_checkpointing": c.recompute,
        "precision": spec.workload.precision,
    }
