"""The walk finds exactly the configs that building and checking every combination finds, in
the same order: rules decided early, answers remembered, whole subtrees reused."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from autotune.problem import Problem, load_problem
from autotune.space import TrainConfig, first_violation
from autotune.space.enumerate import build_config, enumerate_space
from autotune.space.rules import Rule
from autotune.space.spacefile import SearchSpace

SMALL_MEGATRON = {
    "tp": [1, 2, 4],
    "pp": [1, 2, 4],
    "vpp": [1, 2],
    "cp": [1, 2],
    "zero": [0, 1],
    "mbs": [1, 2, 4],
    "recompute": ["none", "full"],
    "recompute_num_layers": [1, 2],
    "sp": [False, True],
    "ddp_bucket_mb": [25, 160],
    "overlap_comm": [False, True],
    "nccl_algo": ["default", "Ring"],
}

READS_ABOVE_ONLY_SOMETIMES = (
    # Reads zero, set far above, only when overlap_comm (set low) is on: a subtree reused
    # for another zero would be wrong.
    Rule("overlap_wants_zero", "test", lambda c, _w, _k: not c.overlap_comm or c.zero == 1),
    # Reads dp (from tp, pp and cp) only for one NCCL algorithm.
    Rule("ring_wants_wide_dp", "test", lambda c, _w, _k: c.nccl_algo != "Ring" or c.dp >= 4),
    # Reads mbs only under full recompute, and then tp.
    Rule(
        "recompute_small_batches",
        "test",
        lambda c, _w, _k: c.recompute != "full" or (c.mbs <= 2 and c.tp != 4),
    ),
)


def flat(problem: Problem, space: SearchSpace, rules: Sequence[Rule]) -> list[TrainConfig]:
    names = list(space.values)
    configs = (
        build_config(dict(zip(names, combo, strict=True)), problem.cluster.world_size)
        for combo in itertools.product(*space.values.values())
    )
    return [
        c for c in configs if first_violation(c, problem.workload, problem.cluster, rules) is None
    ]


@pytest.mark.parametrize(
    ("engine", "model", "cluster"),
    [
        ("megatron", "llama3-8b", "dgx-h100:2"),
        ("megatron", "llama3-70b", "dgx-h100:4"),
        ("torch", "llama3-8b", "local:4"),
        ("deepspeed", "gpt-1.3b", "dgx-a100:2"),
    ],
)
def test_the_walk_finds_what_checking_every_combination_finds(
    engine: str, model: str, cluster: str
) -> None:
    problem = load_problem(engine, model, cluster)
    knobs = {k: tuple(v) for k, v in SMALL_MEGATRON.items() if k in problem.space.values}
    for name, values in problem.space.values.items():
        knobs.setdefault(name, tuple(values[:2]))
    space = SearchSpace(engine=engine, values=knobs)
    for rules in (problem.rules, (*problem.rules, *READS_ABOVE_ONLY_SOMETIMES)):
        walked = enumerate_space(space, problem.workload, problem.cluster, rules)
        expected = flat(problem, space, rules)
        assert list(walked.valid) == expected
        assert walked.total == len(expected) + sum(walked.removed.values())
