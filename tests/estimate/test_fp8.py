"""FP8 training: the model's GEMMs at the FP8 rate, what refuses it, and what Megatron gets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autotune.calibration.saved import calibration_path, load_calibration
from autotune.engines import get_engine
from autotune.engines.megatron import jobs as megatron_job
from autotune.engines.megatron.exports import args_text, transformer_config_kwargs
from autotune.errors import InputError
from autotune.estimate.predict import estimate
from autotune.specs import load_cluster, load_workload
from tests.cli.test_cli_input import refused
from tests.conftest import autotune
from tests.engines.megatron.test_megatron import NEMO_LIKE, megatron_flags
from tests.engines.test_megatron_and_torchtitan_jobs import PRETRAIN

LLAMA70 = load_workload("llama3-70b")
FP8_LLAMA70 = dataclasses.replace(LLAMA70, fp8="tensorwise")


def fp8_model(tmp_path: Path, recipe: str) -> str:
    path = tmp_path / f"llama-{recipe}.yaml"
    shape = {
        k: v
        for k, v in dataclasses.asdict(LLAMA70).items()
        if k not in ("name", "fp8", "precision")
    }
    path.write_text(
        "\n".join(f"{k}: {json.dumps(v)}" for k, v in shape.items()) + f"\nfp8: {recipe}\n"
    )
    return str(path)


def test_fp8_speeds_up_a_compute_bound_step_by_less_than_its_doubled_peak() -> None:
    """Attention's core and the output layer stay in bf16, and FP8 GEMMs reach less of
    their peak (the published bf16/FP8 pairs): well short of 2x."""
    cluster = load_cluster("dgx-h100:8")
    bf16 = estimate(LLAMA70, NEMO_LIKE, cluster, get_engine("megatron").traits)
    fp8 = estimate(FP8_LLAMA70, NEMO_LIKE, cluster, get_engine("megatron").traits)
    speedup = bf16.step.compute_s / fp8.step.compute_s
    assert 1.1 < speedup < 1.6
    assert fp8.memory.weights > bf16.memory.weights  # Transformer Engine's FP8 weight copies
    recomputing = dataclasses.replace(NEMO_LIKE, recompute="full")
    rebuilt = [
        estimate(w, recomputing, cluster, get_engine("megatron").traits).step.recompute_s
        for w in (LLAMA70, FP8_LLAMA70)
    ]
    assert rebuilt[1] < rebuilt[0]  # the recomputed linear layers run in FP8 too


@pytest.mark.parametrize(
    ("engine", "cluster", "recipe", "message"),
    [
        ("deepspeed", "dgx-h100:1", "tensorwise", "does not train in FP8"),
        ("megatron", "dgx-a100:1", "tensorwise", "has no FP8 tensor cores"),
        ("megatron", "dgx-h100:1", "mxfp8", "needs Blackwell"),
        ("megatron", "local:2", "delayed", "has no FP8 tensor cores"),
    ],
)
def test_fp8_where_it_cannot_run_is_refused_in_one_line(
    tmp_path: Path, engine: str, cluster: str, recipe: str, message: str
) -> None:
    model = fp8_model(tmp_path, recipe)
    refused(autotune("plan", "--engine", engine, "--model", model, "--cluster", cluster), message)


def test_an_fp8_model_plans_on_blackwell_with_mxfp8(tmp_path: Path) -> None:
    model = fp8_model(tmp_path, "mxfp8")
    plan = autotune("plan", "--engine", "megatron", "--model", model, "--cluster", "dgx-b200:8")
    assert plan.returncode == 0, plan.stderr


def test_megatron_gets_the_fp8_flags_and_config_it_defines() -> None:
    flags = args_text(FP8_LLAMA70, NEMO_LIKE)
    assert "--fp8-format hybrid" in flags and "--fp8-recipe tensorwise" in flags
    known = megatron_flags()
    assert {"--fp8-format", "--fp8-recipe"} <= set(known)
    from megatron.core.transformer.transformer_config import TransformerConfig

    from autotune.engines.megatron.worker import resolve

    kwargs = transformer_config_kwargs(FP8_LLAMA70, NEMO_LIKE)
    assert (kwargs["fp8"], kwargs["fp8_recipe"]) == ("hybrid", "tensorwise")
    assert "fp8" not in transformer_config_kwargs(LLAMA70, NEMO_LIKE)
    config = TransformerConfig(**resolve({**kwargs, "bf16": False, "params_dtype": None}))
    assert config.fp8 == "hybrid"


def test_a_megatron_command_in_fp8_is_tuned_in_fp8() -> None:
    with_fp8 = [*PRETRAIN, "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
    assert megatron_job.workload_from_command(with_fp8, "x").fp8 == "tensorwise"
    default_recipe = [*PRETRAIN, "--fp8-format", "hybrid"]
    assert megatron_job.workload_from_command(default_recipe, "x").fp8 == "delayed"
    assert megatron_job.workload_from_command(PRETRAIN, "x").fp8 == "none"
    with pytest.raises(InputError, match="--fp8-recipe blockwise"):
        megatron_job.workload_from_command([*default_recipe, "--fp8-recipe", "blockwise"], "x")


def test_a_calibration_saved_before_fp8_keeps_the_fitted_fp8_efficiency(tmp_path: Path) -> None:
    cluster = load_cluster("dgx-h100:2")
    path = calibration_path(tmp_path, cluster)
    path.parent.mkdir(parents=True)
    older = {"compute_efficiency": 0.5, "gemm_half_size": 300.0, "tokens_half": 256.0}
    path.write_text(json.dumps({"calibration": {**older, "bandwidth_scale": 1.0, "overlap": 0.7}}))
    cal, source = load_calibration(tmp_path, cluster)
    assert source.startswith("fitted") and cal.compute_efficiency == 0.5
    assert cal.fp8_efficiency < 1.0  # Hopper's fit, not the generic default
