"""A plan's ranking, which predicts step time in chunks to bound its memory."""

import pytest

from autotune.estimate import ranking
from autotune.estimate.steptime import default_calibration
from autotune.problem import load_problem


def test_chunks_rank_as_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 997 configs, which split layouts' NCCL variants between them, give the same
    order, the same count of configs too big and the same estimates as one table."""
    problem = load_problem("megatron", "llama3-8b", "dgx-h100:1", None)
    valid = problem.enumerate().require_some().valid
    cal = default_calibration("hopper", "megatron")
    whole = ranking.memory_verdicts(problem, valid, cal)
    monkeypatch.setattr(ranking, "CHUNK", 997)
    chunked = ranking.memory_verdicts(problem, valid, cal)
    assert len(whole) > 100 and whole.too_big > 0
    assert (chunked.order == whole.order).all() and chunked.too_big == whole.too_big
    top = whole[:5]
    assert [e.tokens_per_s for e in chunked[:5]] == [e.tokens_per_s for e in top]
    assert chunked[0] == top[0]
    assert top[0].tokens_per_s >= top[4].tokens_per_s
