from pathlib import Path

import pytest

from autotune.errors import InputError
from autotune.problem import load_problem
from autotune.space import TrainConfig, parse_overrides


def space_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def test_overrides_are_typed_by_knob() -> None:
    assert parse_overrides("zero=2, mbs=4,overlap_comm=true,recompute=full") == {
        "zero": 2,
        "mbs": 4,
        "overlap_comm": True,
        "recompute": "full",
    }
    assert parse_overrides("reduce_bucket=5e8") == {"reduce_bucket": 500_000_000}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("zeros=2", "unknown knob 'zeros'"),
        ("zero", "expected knob=value"),
        ("mbs=two", "takes an integer"),
        ("mbs=1.5", "positive integer"),
        ("sp=maybe", "true or false"),
        ("recompute=most", "recompute takes none, selective, full"),
    ],
)
def test_bad_overrides(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_overrides(text)


def test_default_spaces_enumerate_valid_configs() -> None:
    ds = load_problem("deepspeed", "tiny", "local:2").enumerate()
    assert ds.valid and ds.total == len(ds.valid) + sum(ds.removed.values())
    assert all(c.tp == 1 and c.tp * c.pp * c.dp == 2 for c in ds.valid)
    torch = load_problem("torch", "tiny", "local:2").enumerate()
    layouts = {(c.tp, c.pp, c.vpp, c.sp) for c in torch.valid}
    assert {(2, 1, 1, True), (2, 1, 1, False), (1, 2, 1, False), (1, 2, 2, False)} <= layouts


def test_nccl_knobs_survive_only_on_nccl() -> None:
    gloo = load_problem("deepspeed", "tiny", "local:2").enumerate()
    assert {c.nccl_algo for c in gloo.valid} == {"default"}
    nccl = load_problem("deepspeed", "gpt-1.3b", "dgx-h100:1").enumerate()
    assert {"Ring", "Tree", "default"} <= {c.nccl_algo for c in nccl.valid}


def test_space_with_no_valid_config_names_the_rules(tmp_path: Path) -> None:
    path = space_file(tmp_path, "engine: deepspeed\nknobs:\n  pp: [4]\n")
    with pytest.raises(InputError, match="no valid config.*world_size removed 1"):
        load_problem("deepspeed", "tiny", "local:2", path).enumerate().require_some()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("engine: deepspeed\nknobs:\n  turbo: [1]\n", "unknown knob"),
        ("engine: deepspeed\nknobs:\n  pp: [1, 2]\n  dp: [2]\n", "dp is derived"),
        ("engine: deepspeed\nknobs:\n  ddp_bucket_mb: [25]\n", "does not use this knob"),
        ("engine: torch\nknobs:\n  tp: [1]\n", "space is for engine 'torch'"),
        ("engine: deepspeed\nknobs: []\n", "knobs must be a mapping"),
        ("engine: deepspeed\nknobs:\n  zero: []\n", "at least one value"),
        ("engine: deepspeed\nknob:\n  zero: [1]\n", "unknown top-level field"),
    ],
)
def test_bad_space_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_problem("deepspeed", "tiny", "local:2", space_file(tmp_path, text))


def test_single_config_checks_rules_and_dp() -> None:
    problem = load_problem("torch", "tiny", "local:2")
    assert problem.config({"tp": 2, "sp": True}) == TrainConfig(tp=2, dp=1, sp=True)
    with pytest.raises(InputError, match="heads_divisible_by_tp"):
        load_problem("torch", "tiny", "local:8").config({"tp": 8})
    with pytest.raises(InputError, match="dp=4 but the world size 2"):
        problem.config({"dp": 4})
    with pytest.raises(InputError, match="rule world_size"):
        problem.config({"tp": 2, "pp": 2})
    with pytest.raises(InputError, match="does not use reduce_bucket"):
        problem.config({"reduce_bucket": 100})
