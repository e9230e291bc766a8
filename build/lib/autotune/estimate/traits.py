"""What the estimator and the exports need to know of an engine, declared once per engine
beside its rules (`Engine.traits`): how its ZeRO levels hold model states, which buffers it
allocates for communication, how it buckets and overlaps gradient reduction, its own default
calibration where its kernels differ, and how its exported config plugs into a user's own
script. estimate/ and export/ read these and never an engine's name, so a new engine declares
its traits and touches nothing else there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FP32Master = Literal["mixed", "mixed_or_partitioned", "always"]
Overlap = Literal["always", "overlap_comm_from_zero1", "per_flag"]
CalibrationOverrides = tuple[tuple[str, tuple[tuple[str, float], ...]], ...]
"""Per GPU generation, `Calibration` fields and the values that replace the generation's."""


@dataclass(frozen=True, kw_only=True)
class EngineTraits:
    fp32_master: FP32Master
    """When Adam keeps an fp32 copy of the parameters: with mixed precision (PyTorch); also
    when ZeRO 1-2 partitions the optimizer (DeepSpeed); always (Megatron's optimizer)."""
    fp32_main_grads: bool = False
    """Gradients accumulate in fp32 buffers reduced in place and never sharded; zero 1 shards
    only the optimizer states (Megatron's main_grad and distributed optimizer)."""
    fp32_grad_partition: bool = False
    """With mixed precision, ZeRO keeps an fp32 partition of the gradients (DeepSpeed)."""
    zero2_keeps_full_params: bool = False
    """Zero 2 keeps the unsharded parameters beside their shard between forward and backward
    (FSDP2 with reshard_after_forward=False)."""
    zero_bucket_buffers: bool = False
    """ZeRO allocates reduce and all-gather buckets (and zero 3 a prefetch bucket) beside the
    gradients (DeepSpeed)."""
    zero3_resident_layers: int = 0
    """Unsharded layers resident at once under zero 3 (FSDP2 gathers one layer ahead: 2)."""
    reduces_bf16_grads_in_fp32: bool = False
    """bf16 models' gradients are reduced in fp32 (Megatron-LM)."""
    bucket_unit: Literal["elements", "megabytes"]
    """What sizes a gradient bucket: `reduce_bucket` elements or `ddp_bucket_mb` megabytes."""
    one_bucket_without_overlap: bool = False
    """Without overlap the bucket size is ignored and gradients are reduced at once
    (Megatron-LM without --overlap-grad-reduce)."""
    overlap: Overlap
    """How gradient reduction overlaps the backward pass: always (DDP and FSDP hooks); with
    `overlap_comm` from ZeRO 1 up (DeepSpeed reduces after the backward pass at stage 0);
    per flag, gradient reduction with `overlap_comm` and the distributed optimizer's
    parameter gather with `overlap_param_gather` (Megatron-LM)."""
    script_hint: str
    """How a user's own training script uses this engine's exported config (train.sh)."""
    runs_fp8: bool = False
    """Trains with FP8 GEMMs through Transformer Engine (`Workload.fp8`)."""
    runs_moe: bool = False
    """Builds mixture-of-experts layers (`Workload.num_moe_experts`) with expert
    parallelism."""
    cp_gathers_kv: bool = False
    """Context parallelism all-gathers every rank's keys and values, repeated to the query's
    heads, before attention, where nothing hides it (torch's context_parallel, its default
    rotation), instead of passing the key/value heads around a ring behind the attention it
    feeds (Transformer Engine's p2p)."""
    pipeline_split: Literal["uniform", "megatron"] = "uniform"
    """How layers that pp·vpp does not divide are placed (space/pipeline.py): contiguous
    chunks, the first ones a layer longer (DeepSpeed's PipelineModule, the torch worker), or
    Megatron's embedding-and-loss accounting or first/last stage counts."""
    calibration_overrides: CalibrationOverrides = ()
    """Per GPU generation, the calibration fields this engine's kernels set apart from the
    generation's defaults (`estimate/calibration.default_calibration`)."""
