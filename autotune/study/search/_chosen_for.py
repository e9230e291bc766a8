"""Why the guided search chose a config, in words a person reads in the trial table and the
report: a parallel layout not yet measured (and where the model ranks it), a class of a
structural knob no trial has run, a variant of a measured layout, or the leader polished."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.space import TrainConfig
from autotune.study.search._config_codes import REFINING
from autotune.study.search._model_errors import PARALLEL, STRUCTURAL
from autotune.study.verdict.parity_cause import moves, moves_text
from autotune.units import knob_text

CLASS_KNOBS = sorted(STRUCTURAL - set(PARALLEL))
"""The knobs whose values are classes a search measures before trusting the model on them."""
ORDINALS = {1: "st", 2: "nd", 3: "rd"}


def chosen_for(
    config: TrainConfig,
    measured: Sequence[TrainConfig],
    leader: TrainConfig | None,
    candidates: Sequence[TrainConfig],
) -> str:
    """Why `config` is the next trial, given the configs `measured` so far, the measured
    `leader` and the `candidates` in the model's order (fastest first)."""
    layout = _parallel(config)
    if not measured:
        return "nothing measured yet: the model's best"
    reasons = []
    if layout not in {_parallel(c) for c in measured}:
        rank = _layout_rank(layout, candidates)
        reasons.append(f"a layout not yet measured, the model's {_ordinal(rank)}")
    new = [
        f"{k}={knob_text(k, getattr(config, k))}"
        for k in CLASS_KNOBS
        if getattr(config, k) not in {getattr(c, k) for c in measured}
    ]
    if new:
        reasons.append(f"a class unmeasured so far ({', '.join(new)})")
    if reasons:
        return "; ".join(reasons)
    nearest = min(
        (c for c in measured if _parallel(c) == layout), key=lambda c: len(moves(config, c))
    )
    if (
        leader is not None
        and _parallel(leader) == layout
        and set(moves(config, nearest)) <= set(REFINING)
    ):
        return f"polishing the leader ({moves_text(config, leader)})"
    return f"a variant of a measured layout ({moves_text(config, nearest)})"


def _parallel(config: TrainConfig) -> tuple[object, ...]:
    return tuple(getattr(config, k) for k in PARALLEL)


def _layout_rank(layout: tuple[object, ...], candidates: Sequence[TrainConfig]) -> int:
    """Where the model ranks this parallel layout among the distinct ones (1: its best)."""
    seen: set[tuple[object, ...]] = set()
    for config in candidates:
        parallel = _parallel(config)
        if parallel == layout:
            return len(seen) + 1
        seen.add(parallel)
    return len(seen) + 1


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else ORDINALS.get(n % 10, "th")
    return f"{n}{suffix}"
