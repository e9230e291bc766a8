"""`autotune run --launcher replay` over the recorded DeepSpeed sweep."""

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO, autotune

SWEEP = REPO / "results/benchmarks/sweep_deepspeed.csv"
STUDY = "tiny-local_2-deepspeed"


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
