"""A plan's ranking, which predicts step time in chunks to bound its memory."""

import pytest

from autotune.engines import get_engine
from autotune.estimate import ranking
from autotune.estimate.calibration import default_calibration
from autotune.problem import load_problem

CAL = default_calibration("cpu", get_engine("torch").traits)


def test_chunks_rank_as_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 997 configs, which split layouts' NCCL variants between them, give the same
    order, the same count of configs too big and the same estimates as one table."""
    problem = load_problem("megatron", "llama3-8b", "dgx-h100:1", None)
    valid = problem.enumerate().require_some().valid
    cal = default_calibration("hopper", get_engine("megatron").traits)
    whole = ranking.memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, valid, cal
    )
    monkeypatch.setattr(ranking, "CHUNK", 997)
    chunked = ranking.memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, valid, cal
    )
    assert len(whole) > 100 and whole.too_big > 0
    assert (chunked.order == whole.order).all() and chunked.too_big == whole.too_big
    top = whole[:5]
    assert [e.tokens_per_s for e in chunked[:5]] == [e.tokens_per_s for e in top]
    assert chunked[0] == top[0]
    assert top[0].tokens_per_s >= top[4].tokens_per_s


def test_estimates_are_the_same_however_they_are_looked_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """By index (negative too), by slice and by iteration, chunked or not."""
    problem = load_problem("torch", "tiny", "local:4", None)
    ranked = ranking.memory_verdicts(
        problem.workload,
        problem.cluster,
        problem.engine.traits,
        problem.enumerate().require_some().valid,
        CAL,
    )
    monkeypatch.setattr(ranking, "CHUNK", 5)
    looked = list(ranked)
    assert len(looked) == len(ranked) > 10
    assert ranked[:] == looked and ranked[3:9] == looked[3:9]
    assert ranked[-1] == looked[-1] and ranked[0] == looked[0]
    with pytest.raises(IndexError):
        ranked[len(ranked)]
