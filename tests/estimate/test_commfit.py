"""Fitting collective times to commbench rows, and the estimator using the fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.calibration.from_commbench import calibrate_commbench
from autotune.calibration.saved import calibration_path, load_calibration, save_calibration
from autotune.commbench.bench import nccl_variants, sweep_winners
from autotune.engines import get_engine
from autotune.errors import InputError
from autotune.estimate.calibration import Calibration, default_calibration
from autotune.estimate.comm import Group, seconds
from autotune.estimate.commfit import (
    CollectiveFit,
    Regime,
    fit_commbench,
    matching_fit,
    require_fits,
)
from autotune.specs import load_cluster

SIZES = [2**k for k in range(10, 25)]


def row(op: str, size: int, time_s: float, ranks: int = 4, algo: str = "default", **kw):  # type: ignore[no-untyped-def]
    return {
        "op": op, "group": "intra", "ranks": ranks, "nodes": 1, "algo": algo,
        "proto": kw.get("proto", "default"), "bytes": size, "time_s": time_s,
        "correct": kw.get("correct", True),
    }  # fmt: skip


def test_fit_recovers_latency_and_bus_bandwidth() -> None:
    # all_reduce on 4 ranks: bus bytes = size x 2(n-1)/n = 1.5 size; 20 us + 10 GB/s
    rows = [row("all_reduce", s, 20e-6 + 1.5 * s / 10e9) for s in SIZES]
    (fit,) = fit_commbench({"rows": rows})
    assert (fit.op, fit.link, fit.ranks, fit.algo) == ("all_reduce", "intra", 4, "default")
    (regime,) = fit.regimes  # one line explains it all: no second regime
    assert regime.latency_s == pytest.approx(20e-6, rel=1e-6)
    assert regime.busbw_bytes_per_s == pytest.approx(10e9, rel=1e-6)
    assert fit.median_error < 1e-9


def test_a_protocol_switch_is_fitted_as_two_regimes_taking_the_faster() -> None:
    # NCCL's default: LL (5 us, 20 GB/s) for small messages, Simple (40 us, 200 GB/s) for large
    def nccl(size: int) -> float:
        bus = 1.5 * size
        return min(5e-6 + bus / 20e9, 40e-6 + bus / 200e9)

    (fit,) = fit_commbench({"rows": [row("all_reduce", s, nccl(s)) for s in SIZES]})
    assert sorted(
        (round(r.latency_s * 1e6), round(r.busbw_bytes_per_s / 1e9)) for r in fit.regimes
    ) == [
        (5, 20),
        (40, 200),
    ]
    assert fit.median_error < 0.01
    assert fit.seconds(2**30, 4) == pytest.approx(nccl(2**30), rel=0.01)


def test_wrong_one_rank_and_point_to_point_rows_are_not_fitted() -> None:
    rows = (
        [row("all_reduce", s, 1e-5, ranks=1) for s in SIZES]
        + [row("all_to_all", s, 1e-5 + s / 1e9) for s in SIZES]
        + [row("all_gather", s, 1e-5 + s / 1e9, correct=False) for s in SIZES]
    )
    assert fit_commbench({"rows": rows}) == []
    with pytest.raises(InputError, match="crosses no link"):
        require_fits([], "report.json")


def test_each_nccl_setting_gets_its_own_fit_and_the_model_uses_the_matching_one() -> None:
    rows = [row("all_reduce", s, 5e-6 + 1.5 * s / 100e9) for s in SIZES] + [
        row("all_reduce", s, 50e-6 + 1.5 * s / 200e9, algo="Ring", proto="Simple") for s in SIZES
    ]
    fits = tuple(fit_commbench({"rows": rows}))
    assert {(f.algo, f.proto) for f in fits} == {("default", "default"), ("Ring", "Simple")}
    cluster = load_cluster("dgx-h100:2")
    size = 2**26  # per rank
    ring = seconds("all_reduce", size, Group(4, 1), cluster, "Ring", "Simple", fits=fits)
    assert ring == pytest.approx(50e-6 + 1.5 * size / 200e9, rel=1e-6)
    # no fit for Tree, nor for a group across nodes: NCCL's model answers
    for algo, group in (("Tree", Group(4, 1)), ("default", Group(4, 2))):
        assert seconds("all_reduce", size, group, cluster, algo, "Simple", fits=fits) == (
            seconds("all_reduce", size, group, cluster, algo, "Simple")
        )


def test_a_fit_serves_other_group_sizes_with_ring_latency_steps() -> None:
    fit = CollectiveFit("all_gather", "intra", 2, "default", "default", (Regime(10e-6, 1e9),), 0.0)
    assert matching_fit([fit], "all_gather", 1, 8, "default", "default") is fit
    assert matching_fit([fit], "all_gather", 2, 8, "default", "default") is None
    # 8 ranks: 7 steps of latency; all-gather of 1 MB per rank moves 8 MB x 7/8 on the bus
    assert fit.seconds(1e6, 8) == pytest.approx(7 * 10e-6 + 7e6 / 1e9)


def test_the_sweep_covers_what_nccl_implements_per_collective() -> None:
    all_reduce = nccl_variants("all_reduce")
    assert all_reduce[0] == {}  # NCCL's own choice first
    assert len(all_reduce) == 1 + 2 * 3 + 2  # Ring, Tree x LL, LL128, Simple; NVLS(Tree) Simple
    assert {"NCCL_ALGO": "NVLS", "NCCL_PROTO": "Simple"} in all_reduce
    assert {"NCCL_ALGO": "NVLS", "NCCL_PROTO": "LL"} not in all_reduce
    assert nccl_variants("broadcast")[1:] == [
        {"NCCL_ALGO": "Ring", "NCCL_PROTO": p} for p in ("LL", "LL128", "Simple")
    ]
    assert nccl_variants("all_to_all") == nccl_variants("send_recv") == [{}]


def test_sweep_winners_compare_the_fastest_forced_setting_with_the_default() -> None:
    rows = [
        row("all_reduce", 1024, 10e-6),
        row("all_reduce", 1024, 8e-6, algo="Tree", proto="LL"),
        row("all_reduce", 1024, 12e-6, algo="Ring", proto="LL"),
        row("all_reduce", 2048, 10e-6),
        row("all_reduce", 2048, 11e-6, algo="Tree", proto="LL"),
    ]
    winners = sweep_winners({"rows": rows}).set_index("bytes")
    assert (winners.loc[1024, "algo"], winners.loc[1024, "vs_default"]) == (
        "Tree",
        pytest.approx(0.8),
    )
    assert winners.loc[2048, "vs_default"] == pytest.approx(1.1)
    assert sweep_winners({"rows": rows[:1]}).empty


def test_commbench_fits_keep_megatrons_own_defaults_and_a_studys_fit(tmp_path: Path) -> None:
    """Saving collective fits writes no parameter it did not fit: Megatron's compute
    efficiency on H100 stays its own, not the generation's, and a study's fit stays."""
    cluster = load_cluster("dgx-h100:2")
    report = tmp_path / "report.json"
    rows = [row("all_reduce", s, 20e-6 + 1.5 * s / 10e9) for s in SIZES]
    report.write_text(json.dumps({"rows": rows, "cluster": "dgx-h100:2"}))
    calibrate_commbench(report, None, tmp_path)
    megatron, _ = load_calibration(tmp_path, cluster, "megatron")
    assert (
        megatron.compute_efficiency
        == default_calibration("hopper", get_engine("megatron").traits).compute_efficiency
    )
    assert megatron.collectives and load_calibration(tmp_path, cluster, "torch")[0].collectives
    path = calibration_path(tmp_path, cluster)
    save_calibration(path, Calibration(compute_efficiency=0.5), {"study": "s"})
    calibrate_commbench(report, None, tmp_path)
    fitted, _ = load_calibration(tmp_path, cluster, "megatron")
    assert fitted.compute_efficiency == 0.5 and fitted.collectives
