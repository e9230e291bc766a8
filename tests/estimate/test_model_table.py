"""The model predicts a whole table of configs at once: those predictions equal one config's
at a time, and equal the frozen predictions of tests/golden/predictions.json, which the
per-config model wrote before the model became one array computation, and of
tests/golden/predictions_moe_offload.json (mixtures of experts on Megatron and DeepSpeed, the
experts' host wait, DeepSpeed's offload). When the model is meant to change, rewrite a golden
with `python -m tests.estimate.test_model_table NAME` (NAME: predictions or
predictions_moe_offload), then read the diff."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from autotune.engines import get_engine
from autotune.estimate.calibration import DEFAULT_CALIBRATION, Calibration
from autotune.estimate.commfit import CollectiveFit, Regime
from autotune.estimate.predict import estimate, predict
from autotune.estimate.ranking import memory_verdicts
from autotune.problem import Problem, load_problem
from autotune.space import TrainConfig
from autotune.space.enumerate import build_config
from autotune.space.table import ConfigTable
from tests.paths import TESTS

GOLDENS = TESTS / "golden"
GOLDEN = GOLDENS / "predictions.json"
MOE_OFFLOAD_GOLDEN = GOLDENS / "predictions_moe_offload.json"
GOLDEN_CORE_PEAK = 2596.146e6 * 64
"""The CPU core peak the golden's gloo problems were predicted with: the writing host's
clock (2,596.146 MHz, AVX-512) x 64 FLOPs a cycle; read from /proc/cpuinfo, it differs from
host to host and moment to moment."""


CORE_PEAK = "autotune.specs.local._core_peak_flops"


@pytest.fixture(autouse=True)
def golden_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CORE_PEAK, lambda: GOLDEN_CORE_PEAK)


BLOOM = str(TESTS / "data" / "models" / "bloom-72l.yaml")
OFFLOAD = str(TESTS / "data" / "spaces" / "deepspeed_offload.yaml")
PER_PROBLEM = 300
NCCL_SETTINGS = [
    ("default", "default"),
    ("Ring", "default"),
    ("Tree", "LL128"),
    ("NVLS", "Simple"),
    ("default", "LL"),
    ("Ring", "Simple"),
]
COMMBENCH = Calibration(
    compute_efficiency=0.5,
    collectives=(
        CollectiveFit("all_reduce", "intra", 8, "default", "default",
                      (Regime(2e-5, 1e11), Regime(8e-5, 3e11)), 0.02),
        CollectiveFit("reduce_scatter", "inter", 16, "default", "default",
                      (Regime(4e-5, 4e10),), 0.03),
        CollectiveFit("all_gather", "inter", 64, "Ring", "Simple",
                      (Regime(6e-5, 3e10),), 0.03),
    ),
)  # fmt: skip
# Megatron's problems name the generation's calibration, which the golden file was written
# with before Megatron had its own defaults (`EngineTraits.calibration_overrides`).
PROBLEMS: list[tuple[str, str, str, Calibration | None]] = [
    ("megatron", "llama3-70b", "dgx-h100:128", DEFAULT_CALIBRATION["hopper"]),
    ("megatron", BLOOM, "dgx-a100:48", None),
    ("megatron", "llama3.1-405b", "dgx-h100:256", DEFAULT_CALIBRATION["hopper"]),
    ("megatron", "llama3-8b", "gb200-nvl72:2", Calibration()),
    ("megatron", "llama3-8b", "dgx-h100:4", COMMBENCH),
    ("deepspeed", "llama3-8b", "dgx-h100:2", None),
    ("deepspeed", "gpt-1.3b", "dgx-a100:2", COMMBENCH),
    ("deepspeed", "tiny", "local:4", None),
    ("torch", "llama3-70b", "dgx-h100:16", None),
    ("torch", "gpt3-175b", "dgx-a100:64", None),
    ("torch", "tiny", "local:4", None),
]
MOE_OFFLOAD_PROBLEMS: list[tuple[str, str, str, str | None]] = [
    ("megatron", "mixtral-8x7b", "dgx-h100:2", None),  # expert exchanges
    ("megatron", "qwen3-30b-a3b", "dgx-b200:1", None),  # 16 experts a rank: the host waits
    ("deepspeed", "mixtral-8x7b", "dgx-h100:2", None),  # DeepSpeed-MoE
    ("deepspeed", "llama3-8b", "dgx-h100:1", OFFLOAD),  # ZeRO-Offload and ZeRO-Infinity
    ("deepspeed", "mixtral-8x7b", "dgx-h100:1", OFFLOAD),  # both
]
"""Engine, model, cluster and space file (None: the engine's own); each predicted with its
engine's default calibration, as `autotune plan` does."""


def sampled(problem: Problem, rng: random.Random) -> list[TrainConfig]:
    """Valid configs of the problem, some with NCCL settings forced."""
    valid = problem.enumerate().valid
    picked = rng.sample(valid, min(PER_PROBLEM, len(valid)))
    return [
        dataclasses.replace(c, nccl_algo=algo, nccl_proto=proto)
        if c.nccl_algo == "default" and rng.random() < 0.3
        else c
        for c in picked
        for algo, proto in [rng.choice(NCCL_SETTINGS)]
    ]


def predictions() -> list[dict[str, Any]]:
    """The rows of tests/golden/predictions.json, as the model predicts them now."""
    rng = random.Random(16)
    rows = []
    for index, (engine, model, cluster, cal) in enumerate(PROBLEMS):
        problem = load_problem(engine, model, cluster)
        rows += [
            dict(row(problem, config, cal), problem=index) for config in sampled(problem, rng)
        ]
    return rows


def moe_offload_predictions() -> list[dict[str, Any]]:
    """The rows of tests/golden/predictions_moe_offload.json, as the model predicts them."""
    rng = random.Random(26)
    rows = []
    for index, (engine, model, cluster, space) in enumerate(MOE_OFFLOAD_PROBLEMS):
        problem = load_problem(engine, model, cluster, space)
        rows += [{**row(problem, c), "problem": index} for c in sampled(problem, rng)]
    return rows


def row(problem: Problem, config: TrainConfig, cal: Calibration | None = None) -> dict[str, Any]:
    e = estimate(problem.workload, config, problem.cluster, problem.engine.traits, cal)
    return {
        "config": config.differs_from_default(),
        "step": e.step.as_dict(),
        "memory": e.memory.as_dict(),
        "tokens_per_s": e.tokens_per_s,
    }


WRITERS: dict[str, tuple[Path, Callable[[], list[dict[str, Any]]]]] = {
    "predictions": (GOLDEN, predictions),
    "predictions_moe_offload": (MOE_OFFLOAD_GOLDEN, moe_offload_predictions),
}


def write_golden(name: str) -> Path:
    """Rewrite one golden file with today's model, on the golden's CPU core peak. Run only
    by hand (`python -m tests.estimate.test_model_table NAME`), never by pytest."""
    path, rows = WRITERS[name]
    with mock.patch(CORE_PEAK, lambda: GOLDEN_CORE_PEAK):
        lines = [json.dumps(r, sort_keys=True) for r in rows()]
    path.write_text("\n".join(lines) + "\n")
    return path


def golden_rows(path: Path = GOLDEN) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_table_predicts_what_the_per_config_model_predicted() -> None:
    """Every problem's configs predicted as one table (NCCL settings, pipelines split
    unevenly, context parallelism, commbench fits, gloo hosts) equal the golden figures."""
    rows = golden_rows()
    for index, (engine, model, cluster, cal) in enumerate(PROBLEMS):
        problem = load_problem(engine, model, cluster)
        mine = [r for r in rows if r["problem"] == index]
        world = problem.cluster.world_size
        configs = [build_config(r["config"], world) for r in mine]
        table = predict(
            problem.workload,
            ConfigTable.of(configs),
            problem.cluster,
            get_engine(engine).traits,
            cal,
        )
        for i, golden in enumerate(mine):
            e = table.row(i)
            where = f"{engine} {Path(model).stem} {cluster} {configs[i].label()}"
            # Added since the golden: no expert exchange or host wait (dense models), no
            # offload.
            step, memory = e.step.as_dict(), e.memory.as_dict()
            added = (step.pop("ep_comm_s"), step.pop("host_wait_s"), step.pop("offload_s"))
            assert added == (0.0, 0.0, 0.0), where
            assert memory.pop("offloaded") == 0.0, where
            assert step == pytest.approx(golden["step"], rel=1e-9), where
            assert memory == pytest.approx(golden["memory"], rel=1e-9), where
            assert e.tokens_per_s == pytest.approx(golden["tokens_per_s"], rel=1e-9), where


def test_moe_host_wait_and_offload_predictions_equal_their_golden() -> None:
    """Mixtures of experts on Megatron and DeepSpeed, Qwen3's experts waiting on the host,
    and DeepSpeed's optimizer and parameters offloaded, predicted as one table per problem,
    equal tests/golden/predictions_moe_offload.json; and the golden covers each of them."""
    rows = golden_rows(MOE_OFFLOAD_GOLDEN)
    for index, (engine, model, cluster, space) in enumerate(MOE_OFFLOAD_PROBLEMS):
        problem = load_problem(engine, model, cluster, space)
        mine = [r for r in rows if r["problem"] == index]
        configs = [build_config(r["config"], problem.cluster.world_size) for r in mine]
        table = predict(
            problem.workload, ConfigTable.of(configs), problem.cluster, problem.engine.traits
        )
        for i, golden in enumerate(mine):
            e, where = table.row(i), f"{engine} {model} {cluster} {configs[i].label()}"
            assert e.step.as_dict() == pytest.approx(golden["step"], rel=1e-9), where
            assert e.memory.as_dict() == pytest.approx(golden["memory"], rel=1e-9), where
            assert e.tokens_per_s == pytest.approx(golden["tokens_per_s"], rel=1e-9), where
    megatron, deepspeed = (
        [r for r in rows if MOE_OFFLOAD_PROBLEMS[r["problem"]][0] == e]
        for e in ("megatron", "deepspeed")
    )
    covered = {
        "megatron experts": any(r["step"]["ep_comm_s"] > 0 for r in megatron),
        "deepspeed experts": any(r["config"].get("ep", 1) > 1 for r in deepspeed),
        "host wait": any(r["step"]["host_wait_s"] > 0 for r in rows),
        "optimizer offload": any(r["config"].get("offload_optimizer") for r in rows),
        "parameter offload": any(r["config"].get("offload_param") for r in rows),
        "offload time": any(r["step"]["offload_s"] > 0 for r in rows),
        "offloaded memory": any(r["memory"]["offloaded"] > 0 for r in rows),
    }
    assert all(covered.values()), covered


def rows_are_each_config_alone(
    arrange: Callable[[list[TrainConfig], random.Random], list[TrainConfig]], seed: int
) -> None:
    """Each problem's golden configs, arranged into a table by `arrange`, predicted as one
    table: 25 random rows equal their config predicted alone (what `autotune estimate` does)."""
    rng = random.Random(seed)
    rows = golden_rows()
    for index, (engine, model, cluster, cal) in enumerate(PROBLEMS):
        problem = load_problem(engine, model, cluster)
        world = problem.cluster.world_size
        golden = [build_config(r["config"], world) for r in rows if r["problem"] == index]
        configs = arrange(golden, rng)
        table = predict(
            problem.workload,
            ConfigTable.of(configs),
            problem.cluster,
            get_engine(engine).traits,
            cal,
        )
        for i in rng.sample(range(len(configs)), 25):
            alone = estimate(
                problem.workload, configs[i], problem.cluster, get_engine(engine).traits, cal
            )
            assert alone == table.row(i), f"{engine} {cluster} {configs[i].label()}"


def test_one_config_alone_is_predicted_as_in_any_table() -> None:
    """A table's row does not depend on the configs beside it: a shuffled table."""
    rows_are_each_config_alone(lambda configs, rng: rng.sample(configs, len(configs)), seed=7)


def test_a_layouts_nccl_variants_side_by_side_are_predicted_as_each_alone() -> None:
    """A space's walk puts a layout's NCCL variants next to each other, and the model computes
    what they share once for the run: each variant still gets its own collectives."""

    def with_variants(layouts: list[TrainConfig], rng: random.Random) -> list[TrainConfig]:
        return [
            dataclasses.replace(layout, nccl_algo=algo, nccl_proto=proto)
            for layout in rng.sample(layouts, 20)
            for algo, proto in NCCL_SETTINGS
        ]

    rows_are_each_config_alone(with_variants, seed=11)


def test_a_plan_ranks_each_config_as_predicted_alone() -> None:
    """The plan computes memory once per layout and step time for the configs that fit: its
    verdicts are those of each config predicted alone."""
    problem = load_problem("megatron", "mixtral-8x7b", "dgx-h100:2")
    valid = problem.enumerate().valid
    cal = DEFAULT_CALIBRATION[problem.cluster.device.generation]
    ranked = memory_verdicts(problem.workload, problem.cluster, problem.engine.traits, valid, cal)
    rng = random.Random(5)
    for i in rng.sample(range(len(ranked)), 40):
        alone = estimate(
            problem.workload, ranked[i].config, problem.cluster, get_engine("megatron").traits, cal
        )
        assert alone == ranked[i]
    planned = set(ranked.configs)
    assert len(planned) + ranked.too_big == len(valid)
    for config in rng.sample(list(valid), 200):
        alone = estimate(
            problem.workload, config, problem.cluster, get_engine("megatron").traits, cal
        )
        assert alone.fits == (config in planned), config.label()


def main(names: list[str]) -> None:
    """Rewrite the goldens named (see the module's docstring)."""
    if not names or set(names) - set(WRITERS):
        raise SystemExit(
            f"usage: python -m tests.estimate.test_model_table {'|'.join(WRITERS)} ..."
        )
    for name in names:
        print(f"wrote {write_golden(name)}")


if __name__ == "__main__":
    main(sys.argv[1:])
