"""Published expert- and context-parallel runs read as cases of the model, or left out with
a reason."""

import pytest

from autotune.calibration.published_moe_cp import MoeCpCase, cases


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
    assert "GB300: no device preset" in reasons
    assert any(r.startswith("DeepSeek-V3: no shape") for r in reasons)
    assert "M2: not a Megatron run" in reasons
