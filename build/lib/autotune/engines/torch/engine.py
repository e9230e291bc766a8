"""PyTorch-native: DDP, ZeroRedundancyOptimizer, FSDP2, DTensor tensor parallel, pipelining,
context parallel ring attention."""

from __future__ import annotations

from pathlib import Path

from autotune.engines.base import NCCL_KNOBS, NCCL_MEANINGS, RECOMPUTE_MEANING, Engine
from autotune.engines.torch.exports import write_parallel_file
from autotune.engines.torch.jobs import StepHelper, Torchtitan
from autotune.estimate.traits import EngineTraits
from autotune.space import Rule, TrainConfig
from autotune.specs import Cluster, Workload
from autotune.trial.spec import TrialSpec


def _pipeline_fills(c: TrainConfig, w: Workload, _k: Cluster) -> bool:
    """Schedule1F1B needs micro-batches >= stages; the interleaved one splits them in rounds."""
    if c.pp == 1:
        return True
    micro = c.grad_accum(w.global_batch_size)
    if c.vpp == 1:
        return micro >= c.pp
    return micro % max(1, micro // c.pp) == 0


class TorchEngine(Engine):
    name = "torch"
    worker_module = "autotune.engines.torch.worker"
    warm_pool = True
    frameworks = (Torchtitan(), StepHelper())
    traits = EngineTraits(
        fp32_master="mixed",
        zero2_keeps_full_params=True,
        zero3_resident_layers=2,
        bucket_unit="megabytes",
        overlap="always",
        cp_gathers_kv=True,
        script_hint="torch_parallel.yaml lists the mesh and wrappers to apply in your script",
    )
    knobs = frozenset(
        {"tp", "pp", "vpp", "cp", "zero", "hsdp", "mbs", "recompute", "sp", "ddp_bucket_mb"}
    ) | (NCCL_KNOBS)
    knob_meanings = {
        "tp": "DTensor tensor parallelism (ColwiseParallel/RowwiseParallel, Megatron-style)",
        "pp": "torch.distributed.pipelining stages (Schedule1F1B)",
        "vpp": "stages per pipeline rank (ScheduleInterleaved1F1B when > 1)",
        "zero": "0 DDP; 1 DDP + ZeroRedundancyOptimizer; 2 FSDP2 fully_shard("
        "reshard_after_forward=False); 3 FSDP2 reshard_after_forward=True",
        "cp": "context parallelism: torch.distributed.tensor.experimental.context_parallel "
        "(ring attention over a cp mesh dimension, the sequence load-balanced in 2·cp chunks, "
        "FSDP2 sharding over dp·cp ranks); CUDA only",
        "hsdp": "FSDP2 replicas: fully_shard over a 2-D (replicate, shard) DeviceMesh, "
        "each replica sharding over dp/hsdp ranks (HSDP); 1: plain FSDP2",
        "mbs": "micro-batch per rank (accumulation keeps the global batch)",
        "recompute": RECOMPUTE_MEANING,
        "sp": "sequence parallelism beside tp (SequenceParallel norms, residual Shard(1))",
        "ddp_bucket_mb": "DistributedDataParallel(bucket_cap_mb=...), MB",
        **NCCL_MEANINGS,
    }
    engine_rules = (
        Rule(
            "torch_cp_needs_cuda",
            "torch's context parallelism runs ring attention on CUDA's SDPA kernels (flash, "
            "memory-efficient, cuDNN); the CPU's has no ring (no sharding strategy for "
            "_scaled_dot_product_flash_attention_for_cpu)",
            lambda c, _w, k: c.cp == 1 or k.backend == "nccl",
        ),
        Rule(
            "torch_cp_splits_the_sequence",
            "context_parallel's load balancer cuts each sequence into 2·cp equal chunks "
            "(head and tail pairs): seq_length must divide by 2·cp",
            lambda c, w, _k: c.cp == 1 or w.seq_length % (2 * c.cp) == 0,
        ),
        Rule(
            "torch_cp_beside_fsdp_alone",
            "the torch engine runs context parallelism with FSDP2 (zero 2 or 3), whose "
            "gradients reduce over dp·cp ranks, and not yet with tp, pp or HSDP",
            lambda c, _w, _k: (
                c.cp == 1 or (c.zero >= 2 and c.tp == 1 and c.pp == 1 and c.hsdp == 1)
            ),
        ),
        Rule(
            "torch_hsdp_needs_fsdp",
            "hybrid sharding is FSDP2's (zero 2 or 3)",
            lambda c, _w, _k: c.hsdp == 1 or c.zero >= 2,
        ),
        Rule(
            "torch_zero1_plain_ddp",
            "ZeroRedundancyOptimizer (zero 1) wraps plain DDP only: no tp, no pp",
            lambda c, _w, _k: c.zero != 1 or (c.tp == 1 and c.pp == 1),
        ),
        Rule(
            "torch_tp_dp_fsdp",
            "beside tensor parallelism, data parallelism is FSDP2 (zero 2 or 3), not DDP",
            lambda c, _w, _k: c.tp == 1 or c.dp == 1 or c.zero >= 2,
        ),
        Rule(
            "torch_no_tp_with_pp",
            "the torch engine does not combine tp and pp yet",
            lambda c, _w, _k: c.tp == 1 or c.pp == 1,
        ),
        Rule(
            "torch_pipeline_microbatches",
            "torch's 1F1B needs micro-batches >= pp; interleaved needs them in whole rounds",
            _pipeline_fills,
        ),
        Rule(
            "torch_ddp_bucket_needs_ddp",
            "ddp_bucket_mb only acts with DDP (zero 0-1, dp > 1)",
            lambda c, _w, _k: (c.zero <= 1 and c.dp > 1) or c.ddp_bucket_mb == 25,
        ),
    )

    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        return [write_parallel_file(spec, folder)]
