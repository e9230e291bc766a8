"""Published expert- and context-parallel runs read as cases of the model, or left out with
a reason."""

import functools
import statistics

import pytest

from autotune.calibration.published_moe_cp import (
    MoeCpCase,
    anchors,
    cases,
    fitted_engine_defaults,
    fitted_ep_overlap,
    held_out_calibrations,
)
from autotune.engines import get_engine
from autotune.estimate.calibration import DEFAULT_CALIBRATION, Calibration, default_calibration
from autotune.estimate.predict import estimate


def by_row() -> dict[int, MoeCpCase | str]:
    found: dict[int, MoeCpCase | str] = {}
    for c in cases():
        if isinstance(c, MoeCpCase):
            found[c.row_id] = c
    return found


def test_a_qwen3_expert_parallel_run_is_read_with_its_shape_and_figure() -> None:
    run = by_row()[50]  # Megatron-Bridge: Qwen3-30B-A3B, 16 H100, FP8, EP16, 8,826 tok/s/GPU
    assert isinstance(run, MoeCpCase)
    assert (run.config.ep, run.config.dp, run.config.tp) == (16, 16, 1)
    assert run.workload.num_moe_experts == 128 and run.workload.head_dim == 128
    assert run.workload.fp8 == "tensorwise" and run.cluster.world_size == 16
    assert run.published_step_s == pytest.approx(1024 * 4096 / (8826 * 16))


def test_runs_the_model_cannot_express_say_why() -> None:
    reasons = {c for c in cases() if isinstance(c, str)}
    assert "precision NVFP4: not modelled" in reasons
    assert any(r.startswith("DeepSeek-V3: no shape") for r in reasons)
    assert "M2: not a Megatron run" in reasons


def test_megatrons_defaults_are_the_fit_of_its_dense_runs() -> None:
    """Megatron's `EngineTraits.calibration_overrides` state what fitting its compute
    efficiency to its dense runs, and its experts' host time to its MoE runs, gives: a change
    to the model that moves the fit fails here until the constants (scripts/fit_costmodel.py
    prints them) follow."""
    megatron = get_engine("megatron").traits
    stated = {
        ("megatron", g): default_calibration(g, megatron)
        for g, _ in megatron.calibration_overrides
    }
    assert fitted_engine_defaults() == stated
    assert {c.workload.name for c in anchors()} >= {"Llama3-8B", "Llama3-70B", "Llama3.1-405B"}


@functools.cache
def held_out_errors() -> dict[int, float]:
    """Each run's error with Megatron's default calibration, its experts' host time refitted
    to the other releases' runs (the one thing fitted to these runs); fitted once, for the two
    tests that read it."""
    runs = [c for c in cases() if isinstance(c, MoeCpCase)]
    cals = held_out_calibrations(runs)
    errors = {}
    for c in runs:
        step = estimate(
            c.workload, c.config, c.cluster, get_engine("megatron").traits, cals[c.row_id]
        ).step
        errors[c.row_id] = step.total_s / c.published_step_s - 1
    return errors


def test_megatrons_own_defaults_predict_its_held_out_runs_within_15_percent() -> None:
    """Every expert- and context-parallel run, each release's held out of the host-time fit:
    within 15% at the median; the Qwen3-30B-A3B runs at micro-batch 1 on 16 H100s (26.02.01)
    and on 8 B200s (26.02), host-bound, within 45% (now 36% and 42% slow: the host time
    fitted with the B300 and GB300 runs is 0.78 ms, was 0.72), where the model without host
    time (they were admitted with the rule on interleaving fixed) was 47% and 73% fast."""
    errors = held_out_errors()
    assert len(errors) >= 65
    assert statistics.median(abs(e) for e in errors.values()) <= 0.15
    assert abs(errors[181]) < 0.45 and abs(errors[217]) < 0.45


@pytest.mark.parametrize("by", ["source", "model", "GPU"])
def test_the_host_time_held_out_by_source_model_or_gpu_keeps_the_median_within_15_percent(
    by: str,
) -> None:
    """Held out more strictly than by release (the host time, fitted to these runs, never
    sees the run's source, model or GPU), every run still comes within 15% at the median.
    (`ep_overlap` is fitted to M3's rows 295-297 and stays in sample for them.)"""
    runs = [c for c in cases() if isinstance(c, MoeCpCase)]
    cals = held_out_calibrations(runs, by)
    errors = [
        estimate(
            c.workload, c.config, c.cluster, get_engine("megatron").traits, cals[c.row_id]
        ).step.total_s
        / c.published_step_s
        - 1
        for c in runs
    ]
    assert statistics.median(abs(e) for e in errors) <= 0.15


def test_megatrons_own_defaults_predict_its_held_out_context_parallel_runs() -> None:
    """The expert- and context-parallel runs are no part of the compute efficiency's fit. On
    H100, where the generation's default (fitted on llm-foundry's runs) priced Megatron's FP8
    GEMMs at about half their rate, the held-out runs come within 15% at the median, where
    they were 28% off; Llama 3.1 405B with CP2 on 1,024 H100s within 10%."""
    held_out = held_out_errors()
    errors: dict[int, tuple[float, float]] = {}
    for c in cases():
        if isinstance(c, MoeCpCase) and c.cluster.device.generation == "hopper":
            before = estimate(
                c.workload,
                c.config,
                c.cluster,
                get_engine("megatron").traits,
                DEFAULT_CALIBRATION["hopper"],
            ).step.total_s
            errors[c.row_id] = (held_out[c.row_id], before / c.published_step_s - 1)
    assert statistics.median(abs(e[0]) for e in errors.values()) < 0.15
    assert statistics.median(abs(e[1]) for e in errors.values()) > 0.25
    assert abs(errors[39][0]) < 0.1  # NeMo 26.06: 326 tokens/s/GPU published


def test_runs_say_when_megatron_overlaps_the_experts_exchanges() -> None:
    """M3 names the overlap on or off per run; Megatron-Bridge's recipes from 26.06 on run
    Qwen3-30B-A3B in MXFP8 on GB200, GB300 and B300 overlapped inside whole-iteration CUDA
    graphs, whose host issues no kernel per expert; earlier releases and other precisions
    ran without. The share the overlap saves is the fit of M3's runs with and without it."""
    rows = by_row()
    on, off = rows[296], rows[295]  # Qwen3-30B-A3B, 16 H100s, EP16, 2026-07-25
    assert isinstance(on, MoeCpCase) and isinstance(off, MoeCpCase)
    assert on.config.ep_comm_overlap and not off.config.ep_comm_overlap
    graphed, partial = rows[48], rows[134]  # the same layout on GB200, 26.06 and 26.04
    assert isinstance(graphed, MoeCpCase) and isinstance(partial, MoeCpCase)
    assert graphed.graphs_whole_step and graphed.config.ep_comm_overlap
    assert not partial.graphs_whole_step and not partial.config.ep_comm_overlap
    host = default_calibration("blackwell", get_engine("megatron").traits)
    assert (
        graphed.calibrated(host).moe_expert_host_s
        == 0
        < partial.calibrated(host).moe_expert_host_s
    )
    assert fitted_ep_overlap() == Calibration().ep_overlap
