"""The model's free parameters (`Calibration`) and the defaults a prediction starts from, per
GPU generation and, where an engine declares its own (`EngineTraits.calibration_overrides`),
per engine on a generation."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from autotune.estimate.commfit import CollectiveFit
from autotune.estimate.traits import EngineTraits


@dataclass(frozen=True)
class Calibration:
    """The model's free parameters; defaults per device generation, fitted by `calibrate`."""

    compute_efficiency: float = 0.62
    """Share of peak FLOP/s that large GEMMs reach."""
    gemm_half_size: float = 400.0
    """Hidden width per tensor-parallel rank (h/tp, a GEMM's narrow side) at which half that
    share is reached: narrow GEMMs and the elementwise work around them run far from peak."""
    tokens_half: float = 256.0
    """Tokens per micro-batch (a GEMM's long side) at which that share halves: a GPU needs a
    few hundred rows to fill its tensor cores, a CPU core's GEMM is near its best at a few
    dozen, so on a CPU the micro-batch size hardly moves compute efficiency."""
    bandwidth_scale: float = 1.0
    """Share of the collective model's bandwidth the fabric delivers."""
    overlap: float = 0.8
    """Share of the backward pass that data-parallel communication can hide behind."""
    fp8_efficiency: float = 0.75
    """Share of the FP8 peak an FP8 GEMM reaches where a bf16 one reaches all of the bf16
    peak it would: what scaling, casts and transposes leave of FP8's doubled rate. Fitted on
    Hopper (`calibration/fp8_pairs.py`, torchtitan's Float8); the same prior elsewhere
    (Blackwell), as no published pair measures it there, and for Megatron too, whose
    published runs are all FP8 (its `EngineTraits.calibration_overrides` set its compute
    efficiency only)."""
    ep_overlap: float = 0.44
    """Share of the time that Megatron's overlapped expert all-to-alls (`ep_comm_overlap`)
    and the paired micro-batch's compute run side by side (the shorter of the two) that the
    overlap saves: each exchange hides only behind the part of the other pass its schedule
    pairs it with (a combine behind attention, a dispatch behind the experts' GEMMs), and
    the exchange's kernels take SMs from that compute. Fitted to
    the one published pair of runs that differ only in the overlap (Megatron-Bridge's
    Qwen3-30B-A3B on 16 H100s: 24.7 s without, 21.0 s with;
    `published_moe_cp.fitted_ep_overlap`); the same elsewhere until a study refits it."""
    moe_expert_host_s: float = 0.0
    """Host time to issue one local expert's share of an MoE layer, forward and backward,
    for one micro-batch: Transformer Engine's grouped GEMMs cast and multiply each expert
    apart, beside the router and the dispatcher's device-to-host sync of its token counts,
    all issued by Python without CUDA graphs. The GPUs cannot run ahead of the host, so a
    rank's micro-batch takes at least its MoE layers' host time: small micro-batches of a
    narrow MoE with many experts per rank are host-bound (Megatron's Qwen3-30B-A3B, 16
    experts per rank, publishes about 9 ms a layer at micro-batch 1 on H100 and B200 alike,
    the host's pace, not the GPU's; the fit puts it at 11.5 ms). Megatron's, fitted to its
    Hopper and Blackwell runs; 0 elsewhere until a study of an MoE fits it. Per micro-batch
    the model takes the larger of host and GPU time, where the dispatcher's sync makes them
    partly a sum: the fitted value absorbs the difference."""
    collectives: tuple[CollectiveFit, ...] = ()
    """Collective times fitted to this cluster's commbench (`calibrate --commbench`); where
    one matches, it replaces the collective model and bandwidth_scale."""


# GPU defaults: what scripts/fit_costmodel.py fits to the published runs
# (calibration/published.py; tests/calibration/test_costmodel_fit.py checks these are its output,
# scripts/validate_costmodel.py reports the error on them, in sample, and held out by source);
# the CPU default is a first guess for gloo hosts.
DEFAULT_CALIBRATION = {
    "ampere": Calibration(
        compute_efficiency=0.7, gemm_half_size=387.0, bandwidth_scale=1.25, overlap=1.0
    ),
    "hopper": Calibration(
        compute_efficiency=0.46, gemm_half_size=230.0, bandwidth_scale=1.07, overlap=0.8
    ),
    "cpu": Calibration(compute_efficiency=0.3, gemm_half_size=32.0, tokens_half=16.0, overlap=0.3),
}


def default_calibration(generation: str, traits: EngineTraits | None = None) -> Calibration:
    """The calibration a prediction starts from: the generation's (else the generic one),
    with the engine's own overrides on this generation where it declares some."""
    base = DEFAULT_CALIBRATION.get(generation, Calibration())
    by_generation = dict(traits.calibration_overrides) if traits else {}
    overrides: dict[str, Any] = dict(by_generation.get(generation, ()))
    return replace(base, **overrides) if overrides else base
