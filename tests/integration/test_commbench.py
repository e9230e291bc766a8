"""`autotune commbench` on two gloo processes: every collective, every size, checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.commbench import OPS
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


@pytest.mark.parametrize(
    ("flag", "value"), [("--sizes", "4M:1K"), ("--sizes", "big"), ("--ops", "all_reduce,nope")]
)
def test_bad_commbench_input_is_one_line(tmp_path: Path, flag: str, value: str) -> None:
    done = autotune("commbench", "--cluster", "local:2", flag, value, "--results", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "commbench").exists()
