"""The NCCL sweep's "faster than default" table only where a link is crossed: on one rank a
forced setting that times faster is launch noise, not a setting to export or believe."""

from __future__ import annotations

from autotune.commbench.bench import sweep_winners


def row(ranks: int, algo: str, time_s: float) -> dict[str, object]:
    return {
        "op": "all_reduce",
        "group": "intra",
        "ranks": ranks,
        "bytes": 1 << 20,
        "algo": algo,
        "proto": "default" if algo == "default" else "LL",
        "time_s": time_s,
    }


def test_one_rank_has_no_faster_setting() -> None:
    report = {"rows": [row(1, "default", 50e-6), row(1, "Ring", 30e-6)]}
    assert sweep_winners(report).empty


def test_a_setting_faster_across_ranks_is_shown() -> None:
    report = {"rows": [row(2, "default", 50e-6), row(2, "Ring", 30e-6)]}
    winners = sweep_winners(report)
    assert list(winners.algo) == ["Ring"] and winners.vs_default.iloc[0] < 1
