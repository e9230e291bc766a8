"""megatron-core on this CPU: the worker's model build with tp=2, pp=2 on four gloo ranks,
and the forward and backward pass megatron-core allows without CUDA."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.estimate.memory import rank_parameters
from autotune.specs import load_workload
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_tp2_pp2_model_builds_and_its_mlp_path_trains_on_gloo(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "4",
            str(REPO / "tests" / "integration" / "megatron_cpu_probe.py"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
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
