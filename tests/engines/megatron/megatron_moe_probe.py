"""Run by torchrun on gloo: builds the megatron worker's GPTModel for a small mixture of
experts with pp=2, ep=2 on four CPU ranks (megatron-core's own MoE layers, experts split over
the expert-parallel group) and writes each rank's parameter count, all and routed experts',
to <out>/rank<N>.json."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch.distributed as dist

from autotune.engines.megatron.worker import build_chunks, init_model_parallel
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.trial.spec import TrialSpec

MOE_WORKLOAD = dataclasses.replace(
    load_workload("tiny"), num_moe_experts=4, moe_router_topk=2, moe_ffn_hidden_size=128
)
# The allgather dispatcher: the alltoall one opens a CUDA stream when built.
MOE_CONFIG = TrainConfig(pp=2, dp=2, ep=2, moe_dispatcher="allgather")


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    spec = TrialSpec(
        engine="megatron",
        workload=MOE_WORKLOAD,
        cluster=load_cluster("local:4"),
        config=MOE_CONFIG,
    )
    init_model_parallel(spec.config)
    (model,) = build_chunks(spec, on_cpu=True)
    named = list(model.named_parameters())
    report = {
        "parameters": sum(p.numel() for _, p in named),
        "experts": sum(p.numel() for name, p in named if ".experts." in name),
    }
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
