"""megatron-core on this CPU: the worker's model build with tp=2, pp=2 on four gloo ranks,
and the forward and backward pass megatron-core allows without CUDA."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.engines import get_engine
from autotune.estimate.model_states import most_parameters, rank_parameters
from autotune.estimate.stages import Stages
from autotune.space.table import ConfigTable
from autotune.specs import load_workload
from tests.conftest import REPO
from tests.engines.megatron.megatron_moe_probe import MOE_CONFIG, MOE_WORKLOAD

pytestmark = pytest.mark.slow


def _torchrun(probe: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "4",
            str(Path(__file__).with_name(probe)),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )


def test_tp2_pp2_model_builds_and_its_mlp_path_trains_on_gloo(tmp_path: Path) -> None:
    done = _torchrun("megatron_cpu_probe.py", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    firsts = [r for r in reports if r["first"]]
    lasts = [r for r in reports if r["last"]]
    assert len(firsts) == 2 and len(lasts) == 2  # two stages, each split over two tp ranks
    # megatron-core's shards hold exactly what the memory model counts per rank.
    tiny = load_workload("tiny")
    assert max(r["parameters"] for r in reports) == rank_parameters(tiny, 2, 2)
    # The vocab-parallel loss is one number on both tp ranks, about ln(vocab) untrained.
    losses = {r["loss"] for r in lasts}
    assert len(losses) == 1 and abs(losses.pop() - math.log(tiny.vocab_size)) < 0.5
    # Gradients reached every parameter off the attention path, across the stage boundary.
    for r in reports:
        assert all("input_layernorm" in name for name in r["params_without_grad"]), r
        assert "CUDA" in r["attention"], r  # what megatron-core does not allow on CPU


def test_mixture_of_experts_shards_hold_what_the_memory_model_counts(tmp_path: Path) -> None:
    """megatron-core's own MoE layers, experts split over two expert-parallel ranks of a
    pipeline stage: the most loaded rank holds what the memory model says, its experts too."""
    done = _torchrun("megatron_moe_probe.py", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    table = ConfigTable.of([MOE_CONFIG])
    held = most_parameters(
        MOE_WORKLOAD, table, Stages.of(MOE_WORKLOAD, table, get_engine("megatron").traits)
    )
    most = max(reports, key=lambda r: r["parameters"])
    assert most["parameters"] == held.total[0]
    assert most["experts"] == held.experts[0]
    assert most["experts"] == 2 * 4 // 2 * 2 * 64 * 128  # 2 layers, 2 of 4 experts, 2 matrices
