"""Candidate layouts come from the model, the batch and the cluster, so clusters that are not
powers of two plan (the issue on plans at scale: 384 A100s found no valid config)."""

from pathlib import Path

import pytest

from autotune.calibration.saved import load_calibration
from autotune.errors import InputError
from autotune.estimate.ranking import memory_verdicts
from autotune.problem import load_problem
from autotune.space.derive import divisors
from tests.paths import REPO, TESTS

SPACE_2026 = REPO / "scripts" / "spaces" / "megatron_2026.yaml"

DATA = TESTS / "data" / "models"


def test_divisors() -> None:
    assert divisors(72) == (1, 2, 3, 4, 6, 8, 9, 12, 18, 24, 36, 72)
    assert divisors(1) == (1,)


def test_bloom_on_384_a100s_plans_bigscience_layout_among_the_best(tmp_path: Path) -> None:
    """72 layers, global batch 2048 on 48 DGX-A100 nodes: every power-of-two pipeline left
    a factor 3 in dp; derived, pp 3, 6, 12, 24 are there, and TP4 PP12 DP8 (BigScience's
    layout) is among the five best predicted layouts."""
    space = tmp_path / "narrow.yaml"  # the layout knobs stay derived; the rest fixed: fast
    space.write_text(
        "engine: megatron\nknobs:\n  zero: [1]\n  sp: [true]\n  overlap_comm: [true]\n"
        "  overlap_param_gather: [true]\n  recompute: [none, full]\n"
    )
    problem = load_problem("megatron", str(DATA / "bloom-72l.yaml"), "dgx-a100:48", str(space))
    assert problem.space.values["pp"] == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    assert "layers" in problem.space.origins["pp"]
    cal, _ = load_calibration(tmp_path, problem.cluster)  # none saved: the default
    ranked = memory_verdicts(
        problem.workload,
        problem.cluster,
        problem.engine.traits,
        problem.enumerate().require_some().valid,
        cal,
    )
    layouts = list(dict.fromkeys((e.config.tp, e.config.pp, e.config.dp) for e in ranked))
    assert (4, 12, 8) in layouts[:5]


@pytest.mark.parametrize(
    ("engine", "model", "cluster"),
    [
        ("megatron", "llama3-70b", "dgx-h100:48"),
        ("megatron", "llama3-70b", "dgx-h100:96"),
        ("megatron", "gpt3-175b", "dgx-a100:48"),
        ("torch", "llama3-8b", "dgx-h100:12"),
        ("deepspeed", "gpt-1.3b", "dgx-a100:6"),
    ],
)
def test_clusters_that_are_not_powers_of_two_find_valid_configs(
    engine: str, model: str, cluster: str
) -> None:
    """The factor 3 goes where the model allows it; with a batch of 128 that is a pipeline
    of 3, 6, 12 or 24 stages, uneven over 80 or 32 layers (space/pipeline.py)."""
    found = load_problem(engine, model, cluster).enumerate().require_some()
    assert any(c.pp % 3 == 0 for c in found.valid)


def test_100_nodes_plan_with_uneven_pipeline_stages() -> None:
    """800 GPUs = 2^5 x 5^2 and a batch of 128: tp 8, pp 25 (80 layers, Megatron's first and
    last stages shorter), dp 4."""
    found = load_problem("megatron", "llama3-70b", "dgx-h100:100").enumerate().require_some()
    assert {(c.tp, c.pp, c.dp) for c in found.valid} >= {(8, 25, 4)}


def test_a_space_file_narrows_a_derived_knob(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("engine: torch\nknobs:\n  tp: [2]\n")
    problem = load_problem("torch", "llama3-8b", "dgx-h100:2", str(space))
    assert problem.space.values["tp"] == (2,)
    assert problem.space.origins["tp"] == str(space)
    assert problem.space.values["pp"] == (1, 2, 4, 8, 16)  # derived: divides 16 and 32


def test_local_trials_without_transformer_engine_keep_cp_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """megatron-core's own attention has no context parallelism: on a host without Transformer
    Engine every cp > 1 trial would crash, so the local launcher leaves them out up front."""
    from autotune.launchers import local

    problem = load_problem("megatron", "llama3-70b-64k", "dgx-h100:2")
    assert max(problem.space.values["cp"]) > 1
    monkeypatch.setattr(local, "has_transformer_engine", lambda: False)
    narrowed = local.LocalLauncher().narrow(problem)
    assert narrowed.space.values["cp"] == (1,)
    assert "Transformer Engine" in narrowed.space.origins["cp"]
    assert narrowed.enumerate().require_some().valid


def test_local_trials_without_transformer_engine_keep_tp_comm_overlap_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its userbuffers are Transformer Engine's: a space that lists it keeps it off here."""
    from autotune.launchers import local

    problem = load_problem("megatron", "llama3-8b", "dgx-h100:1", str(SPACE_2026))
    assert any(c.tp_comm_overlap for c in problem.enumerate().valid)
    monkeypatch.setattr(local, "has_transformer_engine", lambda: False)
    narrowed = local.LocalLauncher().narrow(problem)
    assert narrowed.space.values["tp_comm_overlap"] == (False,)
    assert not any(c.tp_comm_overlap for c in narrowed.enumerate().valid)


def test_deepspeed_searches_expert_parallelism_and_torch_refuses_experts() -> None:
    problem = load_problem("deepspeed", "mixtral-8x7b", "dgx-h100:2")
    assert problem.space.values["ep"] == (1, 2, 4, 8)  # the divisors of its 8 experts
    with pytest.raises(InputError, match="torch engine does not build mixture-of-experts"):
        load_problem("torch", "mixtral-8x7b", "dgx-h100:2")


def test_a_users_deepspeed_script_with_experts_is_refused(tmp_path: Path) -> None:
    """Its MoE layers set ep_size in its code: a search could not change it, and the model
    would price experts the script splits differently."""
    (tmp_path / "train.py").write_text("import deepspeed\n")
    (tmp_path / "ds.json").write_text('{"train_batch_size": 16}')
    command = (str(tmp_path / "train.py"), "--deepspeed_config", str(tmp_path / "ds.json"))
    with pytest.raises(InputError, match="set their ep_size in its code"):
        load_problem("deepspeed", "mixtral-8x7b", "local:2", None, command)
