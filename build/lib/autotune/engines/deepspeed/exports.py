"""DeepSpeed's files for a config: the ds_config a trial of autotune's worker runs and the
export writes for production."""

from __future__ import annotations

from typing import Any

from autotune.space import TrainConfig
from autotune.specs import Workload

DS_CONFIG_FILE = "ds_config.json"


def ds_config(workload: Workload, config: TrainConfig) -> dict[str, Any]:
    """The DeepSpeed config for a trial; the export writes the same dict for production."""
    zero: dict[str, Any] = {
        "stage": config.zero,
        "reduce_bucket_size": config.reduce_bucket,
        "overlap_comm": config.overlap_comm,
        "contiguous_gradients": True,
    }
    if config.zero in (1, 2):
        zero["allgather_bucket_size"] = config.allgather_bucket
    if config.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if config.offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_batch_size": workload.global_batch_size,
        "train_micro_batch_size_per_gpu": config.mbs,
        "gradient_accumulation_steps": config.grad_accum(workload.global_batch_size),
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
        "gradient_clipping": 1.0,
        "bf16": {"enabled": workload.precision == "bf16"},
        "fp16": {"enabled": workload.precision == "fp16"},
        "zero_optimization": zero,
        "steps_per_print": 1_000_000_000,
        "wall_clock_breakdown": False,
    }
