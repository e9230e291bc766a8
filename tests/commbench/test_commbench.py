"""`autotune commbench` on two gloo processes: every collective, every size, checked."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from autotune.calibration.saved import load_calibration
from autotune.commbench.bench import OPS
from autotune.estimate.comm import Group, seconds
from autotune.specs import load_cluster
from tests.conftest import autotune

pytestmark = pytest.mark.slow


def test_every_collective_is_timed_checked_and_scaled_as_nccl_tests(tmp_path: Path) -> None:
    done = autotune(
        "commbench", "--cluster", "local:2", "--sizes", "1K:1M", "--results", str(tmp_path),
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = report["rows"]
    assert {r["op"] for r in rows} == set(OPS)
    assert sorted({r["bytes"] for r in rows}) == [2**k for k in range(10, 21)]
    assert all(r["correct"] for r in rows)
    factor = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5}
    for r in rows:
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * factor.get(r["op"], 1.0))
    assert report["memcpy_gbps"] > 0
    folder = Path(report["folder"])
    assert (folder / "commbench.csv").exists() and (folder / "report.json").exists()


def test_tensor_parallel_sized_groups_run_side_by_side(tmp_path: Path) -> None:
    # 4 ranks: the whole node, and two groups of 2 adjacent ranks (as tp=2) at once
    done = autotune(
        "commbench", "--cluster", "local:4", "--groups", "intra,intra:2", "--sizes", "1K:8K",
        "--ops", "all_reduce,all_gather", "--results", str(tmp_path), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert {(r["group"], r["ranks"]) for r in rows} == {("intra", 4), ("intra:2", 2)}
    assert len(rows) == 2 * 2 * 4 and all(r["correct"] for r in rows)


def test_calibrating_from_commbench_makes_the_model_predict_its_collectives(
    tmp_path: Path,
) -> None:
    done = autotune(
        "commbench", "--cluster", "local:2", "--sizes", "64K:16M", "--ops", "all_gather",
        "--results", str(tmp_path), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    cluster = load_cluster("local:2")

    def median_error() -> float:
        cal, _ = load_calibration(tmp_path, cluster)
        return statistics.median(
            abs(
                seconds("all_gather", r["bytes"] / 2, Group(2, 1), cluster, fits=cal.collectives)
                / r["time_s"]
                - 1
            )
            for r in report["rows"]
        )

    before = median_error()
    fitted = autotune(
        "calibrate", "--commbench", str(Path(report["folder"]) / "report.json"),
        "--results", str(tmp_path),
    )  # fmt: skip
    assert fitted.returncode == 0, fitted.stderr
    assert "all_gather" in fitted.stdout and "local_2.json" in fitted.stdout
    after = median_error()
    assert after < 0.2 and after < before, (before, after)
    estimate = autotune(
        "estimate", "--cluster", "local:2", "--config", "zero=3,mbs=2", "--results",
        str(tmp_path), "--json",
    )  # fmt: skip
    assert json.loads(estimate.stdout)["calibration"].startswith("fitted")


def test_one_rank_moves_no_data_and_reports_no_bandwidth(tmp_path: Path) -> None:
    done = autotune(
        "commbench", "--cluster", "local:1", "--sizes", "1K:4K", "--ops", "all_reduce",
        "--results", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "no data moved" in done.stdout
    assert "x a memory copy" not in done.stdout
