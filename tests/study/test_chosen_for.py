"""Why each trial was chosen, as a reader of `autotune trials` and the report sees it: a
layout not yet measured (and where the model ranks it), a class never run, a variant of a
measured layout, the leader polished."""

from __future__ import annotations

from pathlib import Path

from autotune.estimate.ranking import memory_verdicts
from autotune.problem import load_problem
from autotune.report.table import trial_role
from autotune.space import TrainConfig
from autotune.study.search._chosen_for import chosen_for
from autotune.study.search._model_errors import PARALLEL
from autotune.study.search.guided.search import GuidedSearch
from tests.study.test_guided import CAL, search

A = TrainConfig(dp=8, tp=2, mbs=2)
B = TrainConfig(dp=4, tp=4, mbs=2)
C = TrainConfig(dp=2, tp=8, mbs=2)
MODEL_ORDER = [A, TrainConfig(dp=8, tp=2, mbs=4), B, C]


def test_nothing_measured_is_the_models_best() -> None:
    assert chosen_for(A, [], None, MODEL_ORDER) == "nothing measured yet: the model's best"


def test_a_new_layout_says_where_the_model_ranks_it() -> None:
    assert chosen_for(C, [A], A, MODEL_ORDER) == "a layout not yet measured, the model's 3rd"


def test_a_value_no_trial_ran_is_a_class_unmeasured() -> None:
    full = TrainConfig(dp=8, tp=2, mbs=2, recompute="full")
    assert chosen_for(full, [A, B], A, MODEL_ORDER) == (
        "a class unmeasured so far (recompute=full)"
    )


def test_a_measured_layout_moved_is_a_variant_and_the_leaders_nccl_is_polishing() -> None:
    bigger = TrainConfig(dp=8, tp=2, mbs=4)
    assert chosen_for(bigger, [A, B], B, MODEL_ORDER) == (
        "a variant of a measured layout (mbs 2->4)"
    )
    ring = TrainConfig(dp=8, tp=2, mbs=2, nccl_algo="Ring")
    assert chosen_for(ring, [A, B], A, MODEL_ORDER) == (
        "polishing the leader (nccl_algo default->Ring)"
    )


def test_every_search_trial_of_a_guided_study_says_why_it_ran(tmp_path: Path) -> None:
    _, _, ran = search(tmp_path, trials=6)
    roles = [trial_role(t) for t in ran]
    assert roles[0] == "search: nothing measured yet: the model's best"
    assert all(role.startswith("search: ") and len(role) > len("search: ") for role in roles)
    assert any("a layout not yet measured, the model's" in role for role in roles[1:])


def test_two_seeds_are_two_opinions_where_new_layouts_nearly_tie() -> None:
    """In the issue's world (llama3-70b, Megatron, 16 DGX H100 nodes) the model's best
    parallel layouts lie within 1% of each other: near-equals, of which another seed
    measures another first, so a second seed is a second opinion."""
    p = load_problem("megatron", "llama3-70b", "dgx-h100:16")
    ranked = memory_verdicts(p.workload, p.cluster, p.engine.traits, p.enumerate().valid, CAL)
    firsts = set()
    for seed in range(8):
        config = GuidedSearch(p, ranked.fastest_first, CAL, seed).propose(set())
        assert config is not None
        firsts.add(tuple(getattr(config, k) for k in PARALLEL))
    assert len(firsts) > 1
