"""`autotune run --launcher replay` over the recorded DeepSpeed sweep (a frozen copy)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO, autotune

SWEEP = REPO / "tests" / "data" / "sweep_deepspeed.csv"
"""A frozen copy of the DeepSpeed sweep (tests/data/README.md)."""
STUDY = "tiny-local_2-deepspeed-replayed"


def test_replay_runs_only_recorded_configs_and_labels_them(tmp_path: Path) -> None:
    done = autotune(
        "run",
        "--launcher",
        "replay",
        "--table",
        str(SWEEP),
        "--cluster",
        "local:2",
        "--trials",
        "50",
        "--results",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "(replayed)" in done.stdout
    rows = json.loads(
        autotune(
            "trials",
            "--study",
            STUDY,
            "--results",
            str(tmp_path),
            "--format",
            "json",
            cwd=tmp_path,
        ).stdout
    )
    table = pd.read_csv(SWEEP)
    recorded = {round(t, 9) for t in table.step_time_s.dropna()}
    assert rows and {r["source"] for r in rows} == {"replayed"}
    assert all(round(r["step_time_s"], 9) in recorded for r in rows if r["step_time_s"])
    assert len({r["label"] for r in rows}) == len(rows)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("tp,step_time_s\n1,0.1\n", "needs knob columns, step_time_s and status"),
        ("zero,step_time_s,status\n1,0.1,melted\n", "unknown status 'melted'"),
    ],
)
def test_bad_tables_are_refused(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "t.csv").write_text(content)
    done = autotune(
        "run", "--launcher", "replay", "--table", "t.csv", "--cluster", "local:2", cwd=tmp_path
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_replay_without_a_table_is_refused(tmp_path: Path) -> None:
    done = autotune("run", "--launcher", "replay", cwd=tmp_path)
    assert done.returncode == 2 and "--table" in done.stderr


def test_thorough_searches_past_the_default_budget_until_few_configs_could_still_win(
    tmp_path: Path,
) -> None:
    def stopped(*flags: str) -> str:
        done = autotune(
            "run", "--launcher", "replay", "--table", str(SWEEP), "--cluster", "local:2",
            "--results", str(tmp_path / str(len(flags))), *flags, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return next(line for line in done.stdout.splitlines() if line.startswith("stopped:"))

    assert stopped() == "stopped: trial budget reached (8 trials)"
    assert "of them expected to beat the best by more than 2%" in stopped("--thorough")
