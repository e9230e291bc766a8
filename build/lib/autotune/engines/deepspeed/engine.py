"""DeepSpeed: ZeRO 0-3, bucket sizes and overlap, PipelineModule when pp > 1, DeepSpeed-MoE
with expert parallelism for a mixture of experts."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.engines.base import NCCL_KNOBS, NCCL_MEANINGS, RECOMPUTE_MEANING, Engine
from autotune.engines.deepspeed.exports import DS_CONFIG_FILE, ds_config
from autotune.engines.deepspeed.jobs import DeepSpeedScript, HuggingFaceTrainer
from autotune.estimate.traits import EngineTraits
from autotune.space import Rule, TrainConfig
from autotune.specs import Cluster
from autotune.trial.spec import PoolKind, TrialSpec


class DeepSpeedEngine(Engine):
    name = "deepspeed"
    needs = ("torch", "deepspeed")
    worker_module = "autotune.engines.deepspeed.worker"
    warm_pool = True
    frameworks = (HuggingFaceTrainer(), DeepSpeedScript())
    traits = EngineTraits(
        fp32_master="mixed_or_partitioned",
        fp32_grad_partition=True,
        zero_bucket_buffers=True,
        bucket_unit="elements",
        overlap="overlap_comm_from_zero1",
        script_hint="pass ds_config.json to deepspeed.initialize(config=...) in your script "
        "and launch it with the same torchrun line",
        runs_moe=True,
    )
    knobs = (
        frozenset(
            {"pp", "zero", "mbs", "recompute", "reduce_bucket", "allgather_bucket", "overlap_comm"}
            | {"offload_optimizer", "offload_param", "ep"}
        )
        | NCCL_KNOBS
    )
    knob_meanings = {
        "pp": "PipelineModule(num_stages=pp, partition_method='type:<block class>') with "
        "DeepSpeed's pipeline engine (the first stages a block more where pp does not divide "
        "the layers)",
        "zero": "zero_optimization.stage: 0 none, 1 optimizer states, 2 + gradients, "
        "3 + parameters partitioned",
        "mbs": "train_micro_batch_size_per_gpu (gradient accumulation keeps the global batch)",
        "recompute": RECOMPUTE_MEANING,
        "reduce_bucket": "zero_optimization.reduce_bucket_size, in elements",
        "allgather_bucket": "zero_optimization.allgather_bucket_size, in elements (ZeRO 1-2)",
        "overlap_comm": "zero_optimization.overlap_comm",
        "offload_optimizer": "zero_optimization.offload_optimizer.device cpu (ZeRO-Offload: "
        "optimizer states and step on the host, DeepSpeedCPUAdam)",
        "offload_param": "zero_optimization.offload_param.device cpu (ZeRO 3: parameters in "
        "host memory)",
        "ep": "deepspeed.moe.layer.MoE(ep_size=ep) in your model (mixtures of experts: the "
        "routed experts split over ep data-parallel ranks, their states sharded over the "
        "dp/ep that hold the same experts; top-k routing, no token dropped); not a "
        "ds_config key",
        **NCCL_MEANINGS,
    }
    engine_rules = (
        Rule(
            "deepspeed_offload_optimizer_needs_zero",
            "the optimizer is offloaded with its ZeRO partition (stages 1-3)",
            lambda c, _w, _k: not c.offload_optimizer or c.zero >= 1,
        ),
        Rule(
            "deepspeed_offload_param_needs_zero3",
            "parameters are offloaded only where ZeRO 3 partitions them, beside the optimizer "
            "(DeepSpeed: offload_param with offload_optimizer)",
            lambda c, _w, _k: not c.offload_param or (c.zero == 3 and c.offload_optimizer),
        ),
        Rule(
            "deepspeed_moe_zero12",
            "DeepSpeed's own MoE layers train with ZeRO stages 0-2 ('Native DeepSpeed MoE is "
            "not supported with ZeRO Stage 3')",
            lambda c, w, _k: not w.is_moe or c.zero <= 2,
        ),
        Rule(
            "deepspeed_moe_without_pipeline",
            "autotune builds DeepSpeed-MoE layers in the plain engine only, not in "
            "PipelineModule stages (pp 1 for a mixture of experts)",
            lambda c, w, _k: not w.is_moe or c.pp == 1,
        ),
        Rule(
            "deepspeed_no_tp",
            "DeepSpeed alone has no tensor parallelism (tp must be 1)",
            lambda c, _w, _k: c.tp == 1,
        ),
        Rule(
            "deepspeed_no_vpp",
            "DeepSpeed's PipelineModule has no interleaved schedule (vpp 1)",
            lambda c, _w, _k: c.vpp == 1,
        ),
        Rule(
            "deepspeed_pipeline_zero",
            "DeepSpeed's pipeline engine supports ZeRO stages 0-1 only",
            lambda c, _w, _k: c.pp == 1 or c.zero <= 1,
        ),
        Rule(
            "deepspeed_overlap_needs_zero",
            "overlap_comm only acts with ZeRO stages 1-3",
            lambda c, _w, _k: c.zero > 0 or not c.overlap_comm,
        ),
        Rule(
            "deepspeed_allgather_bucket_zero12",
            "allgather_bucket only acts with ZeRO stages 1-2 (stage 3 prefetches instead)",
            lambda c, _w, _k: (
                c.zero in (1, 2) or c.allgather_bucket == TrainConfig().allgather_bucket
            ),
        ),
    )

    def pool_for(self, spec: TrialSpec) -> PoolKind | None:
        # A PipelineModule's grid stays in deepspeed.utils.groups.mpu after its engine is
        # gone, and would give a later trial in a warm pool the old data-parallel group.
        pool = super().pool_for(spec)
        return None if pool == "warm" and spec.config.pp > 1 else pool

    def script_hint(self, spec: TrialSpec) -> str:
        hint = super().script_hint(spec)
        if not spec.workload.is_moe:
            return hint
        w = spec.workload
        return (
            f"{hint}; build its layers as measured: deepspeed.moe.layer.MoE(..., "
            f"num_experts={w.num_moe_experts}, ep_size={spec.config.ep}, "
            f"k={w.moe_router_topk}, drop_tokens=False, top2_2nd_expert_sampling=False)"
        )

    def environment(self, cluster: Cluster) -> dict[str, str]:
        # DeepSpeed picks its accelerator at import; on CPU clusters it must be told.
        return {"DS_ACCELERATOR": "cpu"} if cluster.backend == "gloo" else {}

    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        path = folder / DS_CONFIG_FILE
        path.write_text(json.dumps(ds_config(spec.workload, spec.config), indent=2) + "\n")
        return [path]
