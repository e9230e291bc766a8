"""The megatron engine's translation: megatron-core's own config classes accept it, the
exported Megatron-LM flags are ones its parser defines, and the exports match golden files."""

from __future__ import annotations

import dataclasses
import os
import random
import re
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.engines import get_engine
from autotune.engines.megatron.engine import args_text, core_snippet
from autotune.engines.megatron.exports import (
    bucket_parameters,
    ddp_config_kwargs,
    optimizer_config_kwargs,
    pretrain_gpt_flags,
    transformer_config_kwargs,
)
from autotune.export.scripts import nccl_env_text, train_script
from autotune.problem import load_problem
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.trial.spec import TrialSpec
from tests.conftest import autotune
from tests.fakes import sbatch_text
from tests.paths import TESTS

GOLDEN = TESTS / "golden" / "megatron"
FLAGS_FILE = TESTS / "data" / "megatron_lm_flags.txt"
LLAMA70 = load_workload("llama3-70b")
# NeMo's llama3_70b pretrain recipe (nemo/collections/llm/recipes/llama3_70b.py) without its
# context parallelism: TP4 PP4 VPP5, sequence parallel, distributed optimizer, both overlaps.
NEMO_LIKE = TrainConfig(
    tp=4,
    pp=4,
    vpp=5,
    dp=2,
    sp=True,
    zero=1,
    mbs=1,
    overlap_comm=True,
    overlap_param_gather=True,
    ddp_bucket_mb=160,
)
RECOMPUTING = TrainConfig(
    tp=2, pp=2, dp=8, mbs=2, recompute="full", recompute_method="block", recompute_num_layers=3
)
# 80 layers on 6 stages: Megatron's first and last stages given their own counts.
UNEVEN = TrainConfig(tp=8, pp=6, dp=1, sp=True, mbs=1)
# NeMo's llama3_70b recipe itself, with context parallelism: TP4 PP4 CP2 VPP5 on 64 GPUs.
CONTEXT_PARALLEL = dataclasses.replace(NEMO_LIKE, cp=2)
MIXTRAL = load_workload("mixtral-8x7b")
# Megatron-Bridge's Mixtral 8x7B layout on 64 H100: TP1 PP4 VPP8 EP8.
EXPERT_PARALLEL = TrainConfig(
    pp=4, vpp=8, dp=16, ep=8, zero=1, mbs=1, overlap_comm=True, overlap_param_gather=True
)
# Qwen3-30B-A3B (128-wide heads on a 2,048 hidden size) with experts split over tensor ranks
# too, tokens gathered rather than sent all-to-all.
QWEN3 = load_workload("qwen3-30b-a3b")
EXPERT_TENSOR_PARALLEL = TrainConfig(
    tp=2, dp=8, ep=4, etp=2, sp=True, zero=1, mbs=2, moe_dispatcher="allgather"
)
CASES = {
    "nemo_like": (LLAMA70, NEMO_LIKE),
    "recomputing": (LLAMA70, RECOMPUTING),
    "uneven_stages": (LLAMA70, UNEVEN),
    "context_parallel": (LLAMA70, CONTEXT_PARALLEL),
    "expert_parallel": (MIXTRAL, EXPERT_PARALLEL),
    "expert_tensor_parallel": (QWEN3, EXPERT_TENSOR_PARALLEL),
    # Selective recomputation of the MLP beside the attention core, as recipes that are
    # short of memory run it.
    "selective_modules": (
        LLAMA70,
        dataclasses.replace(NEMO_LIKE, recompute="selective", recompute_modules="core_attn+mlp"),
    ),
    # Transformer Engine's TP overlap, as Megatron-Bridge's recipes with tp > 1 run it.
    "tp_comm_overlap": (LLAMA70, dataclasses.replace(NEMO_LIKE, tp_comm_overlap=True)),
    # Megatron-Bridge's Qwen3-30B-A3B on 16 H100s: EP16 with the experts' all-to-alls
    # overlapped (perf_recipes/qwen/h100/qwen3_moe.py).
    "ep_comm_overlap": (
        QWEN3,
        TrainConfig(dp=16, ep=16, zero=1, mbs=1, overlap_comm=True, ep_comm_overlap=True),
    ),
}
VARIADIC = {"--recompute-modules"}
"""Flags that take one value or more (argparse nargs='+')."""
LLAMA405 = load_workload("llama3.1-405b")
# Megatron-Bridge's Llama 3.1 405B layout (perf_recipes/llama/h100/llama31.py, without CP):
# 126 layers, the embedding and loss counted as layers: 128 = 8 ranks x 8 chunks x 2.
BRIDGE_405B = TrainConfig(tp=8, pp=8, vpp=8, dp=16, sp=True, zero=1, mbs=1)


def megatron_flags() -> dict[str, bool]:
    """Megatron-LM's flags (tests/data, from its argument parser): flag -> takes a value."""
    flags = {}
    for line in FLAGS_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            flag, _, value = line.partition(" ")
            flags[flag] = bool(value)
    return flags


def check_golden(name: str, text: str, folder: Path = GOLDEN) -> None:
    """Compare with tests/golden/megatron/NAME (or `folder`/NAME); AUTOTUNE_UPDATE_GOLDEN=1
    rewrites it."""
    path = folder / name
    if os.environ.get("AUTOTUNE_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file"


def best_trial(tokens_per_s: float, source: str) -> optuna.trial.FrozenTrial:
    study = optuna.create_study(direction="maximize")
    study.add_trial(
        optuna.trial.create_trial(
            value=tokens_per_s, user_attrs={"tokens_per_s": tokens_per_s, "source": source}
        )
    )
    return study.trials[0]


@pytest.mark.parametrize("name", CASES)
def test_args_and_snippet_match_golden_files(name: str) -> None:
    workload, config = CASES[name]
    check_golden(f"{name}.megatron_args.txt", args_text(workload, config))
    check_golden(f"{name}.megatron_core.py", core_snippet(workload, config))


def test_train_script_and_nccl_env_match_golden_files() -> None:
    spec = TrialSpec(
        engine="megatron",
        workload=LLAMA70,
        cluster=load_cluster("dgx-h100:4"),
        config=NEMO_LIKE,
    )
    trial = best_trial(12345.0, "simulated")
    check_golden("train.sh", train_script(get_engine("megatron"), spec, trial, "seventy"))
    check_golden("nccl.env", nccl_env_text({}, spec, trial))
    check_golden("train.sbatch", sbatch_text(spec, trial, "seventy"))


@pytest.mark.parametrize("name", CASES)
def test_every_flag_is_one_megatron_lm_defines(name: str) -> None:
    known = megatron_flags()
    for _comment, lines in pretrain_gpt_flags(*CASES[name]):
        for line in lines:
            flag, *values = line.split()
            assert flag in known, f"Megatron-LM has no {flag}"
            if flag in VARIADIC:
                assert values, f"{line}: no values"
            else:
                assert len(values) == (1 if known[flag] else 0), f"{line}: wrong number of values"


def test_uneven_stages_are_placed_and_exported_as_megatron_does() -> None:
    """Megatron-core itself accepts the placements (its TransformerConfig checks them), and
    the flags are Megatron-LM's."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    from autotune.engines.megatron.worker import resolve

    flags = args_text(LLAMA405, BRIDGE_405B)
    assert "--account-for-embedding-in-pipeline-split" in flags
    assert "--account-for-loss-in-pipeline-split" in flags
    assert "--num-virtual-stages-per-pipeline-rank 8" in flags
    assert "--num-layers-per-virtual-pipeline-stage" not in flags
    known = megatron_flags()
    for _comment, lines in pretrain_gpt_flags(LLAMA405, BRIDGE_405B):
        assert all(line.split()[0] in known for line in lines)
    bridge = TransformerConfig(**resolve(transformer_config_kwargs(LLAMA405, BRIDGE_405B)))
    assert bridge.account_for_embedding_in_pipeline_split
    uneven = TransformerConfig(**resolve(transformer_config_kwargs(LLAMA70, UNEVEN)))
    assert (
        uneven.num_layers_in_first_pipeline_stage,
        uneven.num_layers_in_last_pipeline_stage,
    ) == (
        11,
        13,
    )  # 11 + 4 x 14 + 13 = 80: the middle stages set the pace, as evenly as Megatron allows
    assert "--decoder-first-pipeline-num-layers 11" in args_text(LLAMA70, UNEVEN)


def test_bucket_flag_counts_parameters_and_is_left_out_without_overlap() -> None:
    assert bucket_parameters(NEMO_LIKE) == 160 * 2**20 // 4
    assert f"--ddp-bucket-size {160 * 2**20 // 4}" in args_text(LLAMA70, NEMO_LIKE)
    assert "--ddp-bucket-size" not in args_text(LLAMA70, RECOMPUTING)
    assert ddp_config_kwargs(LLAMA70, RECOMPUTING)["bucket_size"] is None


def sample_layouts(count: int) -> list[TrainConfig]:
    """Valid configs of the megatron space for llama3-8b on 32 H100s, spread over layouts."""
    problem = load_problem("megatron", "llama3-8b", "dgx-h100:4")
    configs = problem.enumerate().valid
    by_layout: dict[tuple[int, int, int], list[TrainConfig]] = {}
    for c in configs:
        by_layout.setdefault((c.tp, c.pp, c.vpp), []).append(c)
    rng = random.Random(0)
    picked = [rng.choice(group) for group in by_layout.values()]
    picked += rng.sample(configs, max(0, count - len(picked)))
    return picked


def test_megatron_core_config_classes_accept_a_grid_of_layouts() -> None:
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    from autotune.engines.megatron.worker import resolve

    layouts = sample_layouts(60)
    assert len({(c.tp, c.pp, c.vpp) for c in layouts}) >= 10
    workload = load_workload("llama3-8b")
    for config in layouts:
        transformer = TransformerConfig(**resolve(transformer_config_kwargs(workload, config)))
        assert transformer.tensor_model_parallel_size == config.tp
        assert transformer.sequence_parallel == config.sp
        ddp = DistributedDataParallelConfig(**ddp_config_kwargs(workload, config))
        assert ddp.use_distributed_optimizer == (config.zero == 1)
        OptimizerConfig(**resolve(optimizer_config_kwargs(workload, config)))


@pytest.mark.parametrize("name", CASES)
def test_exported_snippet_builds_the_config_objects(name: str) -> None:
    workload, config = CASES[name]
    scope: dict[str, object] = {}
    exec(core_snippet(workload, config), scope)  # noqa: S102 - our own export
    transformer = scope["transformer_config"]
    assert transformer.pipeline_model_parallel_size == config.pp  # type: ignore[attr-defined]
    if workload.is_moe:
        experts = (transformer.expert_model_parallel_size, transformer.expert_tensor_parallel_size)  # type: ignore[attr-defined]
        assert experts == (config.ep, config.etp)
        assert transformer.num_moe_experts == workload.num_moe_experts  # type: ignore[attr-defined]
    assert scope["num_microbatches"] == config.grad_accum(workload.global_batch_size)


def test_local_megatron_trials_are_refused_on_cpu(tmp_path: Path) -> None:
    for command in (
        ("run", "--engine", "megatron", "--trials", "1", "--results", str(tmp_path)),
        ("trial", "--engine", "megatron", "--out", str(tmp_path / "t")),
    ):
        done = autotune(*command, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        line = done.stderr.strip()
        assert "\n" not in line and re.search(r"megatron engine needs GPUs", line)
        assert "--launcher simulate" in line
    assert not (tmp_path / "t").exists()


@pytest.mark.slow
def test_simulated_70b_study_picks_and_exports_a_megatron_style_layout(tmp_path: Path) -> None:
    done = autotune(
        "run",
        "--engine",
        "megatron",
        "--model",
        "llama3-70b",
        "--cluster",
        "dgx-h100:32",
        "--launcher",
        "simulate",
        "--trials",
        "6",
        "--results",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    best = tmp_path / "llama3-70b-dgx-h100_32-megatron-simulated" / "best"
    record = yaml.safe_load((best / "best.yaml").read_text())
    assert record["source"] == "simulated"
    c = TrainConfig(**record["config"])
    # What Megatron users run for 70B on H100 nodes: tensor and context parallel together
    # over a whole NVLink node (NeMo's llama3_70b recipe: TP4 CP2, with sequence parallelism,
    # which the model prices as a tie where memory allows), and beside data parallelism the
    # distributed optimizer with both overlaps.
    assert c.tp * c.cp == 8
    assert c.dp == 1 or (c.zero == 1 and c.overlap_comm and c.overlap_param_gather)
    args = (best / "megatron_args.txt").read_text()
    assert args.startswith("# SIMULATED")
    known = megatron_flags()
    flags = [line.split()[0] for line in args.splitlines() if not line.startswith("#")]
    assert flags and all(flag in known for flag in flags)
    assert f"--tensor-model-parallel-size {c.tp}" in args
    assert (f"--context-parallel-size {c.cp}" in args) == (c.cp > 1)
