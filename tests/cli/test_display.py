"""What a person reads in the terminal: the trials table and the run's summary in human
units, one line per trial, columns that never vary said once above the table; the CSV and
JSON of `autotune trials` keep every column and the raw numbers."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from autotune.cli.summary import study_summary
from autotune.cli.trial_tables import config_table, trial_table
from autotune.report.configs import config_table as configs_of
from autotune.report.table import COLUMNS
from autotune.report.table import trial_table as table_of
from autotune.study.record.storage import study_ref
from tests.conftest import autotune
from tests.fakes import UNITS_CHOICES, units_study
from tests.paths import GOLDEN

SCIENTIFIC = re.compile(r"\d\.\d+e[+-]?\d", re.IGNORECASE)
RAW_COUNT = re.compile(r"\d{7,}")
"""A byte count or bucket size as a raw integer: 7 digits or more."""


def printed(width: int, show: Callable[..., None], *args: Any) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    show(console, *args)
    return console.export_text()


def trial_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("│")]


def test_the_trials_table_is_in_human_units() -> None:
    text = printed(160, trial_table, table_of(units_study()))
    assert not SCIENTIFIC.search(text) and not RAW_COUNT.search(text), text
    for shown in ("444.5 MiB", "47.7 GiB", "40,213", "12.3 ms", "reduce_bucket=50M"):
        assert shown in text


def test_columns_that_never_vary_are_said_once_above_the_table() -> None:
    text = printed(160, trial_table, table_of(units_study()), "deepspeed")
    assert text.splitlines()[0] == "all trials: engine deepspeed, dp=8, source measured"
    header = next(line for line in text.splitlines() if "config" in line)
    assert "source" not in header and "stopped" not in header and "reason" in header
    rows = trial_rows(text)
    assert not any("dp=8" in row or "measured" in row for row in rows)
    assert "zero=2,mbs=4,reduce_bucket=50M" in rows[0]


@pytest.mark.parametrize("width", [80, 120, 200])
def test_one_line_per_trial_the_reason_cut_to_fit(width: int) -> None:
    text = printed(width, trial_table, table_of(units_study()))
    rows = trial_rows(text)
    assert len(rows) == 6 and all(len(row) <= width for row in rows), text
    oom = next(row for row in rows if " oom " in row or "CUDA" in row)
    assert "…" in oom or width < 120  # at 80 the reason gives way to the numbers


def test_the_runs_summary_is_in_human_units() -> None:
    study = units_study()
    text = printed(160, study_summary, study, study_ref("units", None, Path("results")), [])
    assert not SCIENTIFIC.search(text) and not RAW_COUNT.search(text), text
    assert "dp=8,zero=2,mbs=4,reduce_bucket=50M  40,213 tok/s" in text


def test_the_runs_summary_matches_its_golden() -> None:
    """The summary the getting-started page shows (docs/hooks.py reads this golden): the
    winner with its range, the runner-up, the user's own config, the spread."""
    from tests.fakes import sample_study

    ref = study_ref("tiny-local-deepspeed", None, Path("results"))
    console = Console(width=100, soft_wrap=True, record=True, file=io.StringIO())
    study_summary(console, sample_study(), ref, [])
    text = console.export_text()
    golden = GOLDEN / "summary.txt"
    if os.environ.get("AUTOTUNE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()
    assert "your own config (dp=2,mbs=4, trial 0" in text


def test_csv_and_json_keep_every_column_and_raw_numbers(tmp_path: Path) -> None:
    folder = tmp_path / "units"
    folder.mkdir()
    units_study(f"sqlite:///{folder / 'study.db'}")
    where = ("--study", "units", "--results", str(tmp_path))
    rows = json.loads(autotune("trials", *where, "--format", "json", cwd=tmp_path).stdout)
    table = autotune("trials", *where, "--format", "csv", cwd=tmp_path).stdout
    records = list(csv.DictReader(io.StringIO(table)))
    every = {*COLUMNS, *UNITS_CHOICES, "label"}
    assert set(rows[0]) == every and set(records[0]) == every
    assert rows[0]["peak_memory_bytes"] == 466_059_123 and rows[0]["reduce_bucket"] == 50_000_000
    assert rows[0]["label"] == "dp=8,zero=2,mbs=4,reduce_bucket=50000000"
    assert float(records[0]["peak_memory_bytes"]) == 466_059_123
    assert records[0]["tokens_per_s"] == "40213.4" and records[0]["reduce_bucket"] == "50000000"
    shown = autotune("trials", *where, "--launches", cwd=tmp_path, env={"COLUMNS": "150"})
    assert len(trial_rows(shown.stdout)) == 6 and "444.5 MiB" in shown.stdout


def test_the_runs_summary_never_prints_the_storage_password() -> None:
    url = "postgresql://tuner:s3cret-pw@db.example:5432/studies"
    text = printed(160, study_summary, units_study(), study_ref("units", url, Path("r")), [])
    assert "s3cret-pw" not in text and "postgresql://tuner:***@db.example:5432/studies" in text


def test_a_summary_whose_leaders_are_within_noise_says_so_and_what_would_settle_them() -> None:
    """Two configs 1% apart on a cluster whose launches differ by 10%: the summary says in
    words that either will do, and names the option that repeats them more."""
    from autotune.space import TrainConfig
    from tests.fakes import add_measured, new_study

    study = new_study(between=0.10)
    add_measured(study, 101.0, TrainConfig(mbs=1), label=True)
    add_measured(study, 100.0, TrainConfig(mbs=2), label=True)
    text = printed(250, study_summary, study, study_ref("s", None, Path("r")), [])
    assert "trials 0 and 1 are within noise of each other; either will do" in text, text
    assert "more repeats of each would resolve a 5% gap" in text
    assert "autotune run --thorough" in text


def test_a_summary_whose_winner_is_your_own_config_says_so() -> None:
    from autotune.space import TrainConfig, config_key
    from autotune.study.record.trial_attrs import USERS_CONFIG
    from tests.fakes import add_measured, new_study

    study = new_study(between=0.01)
    yours = TrainConfig(mbs=1)
    add_measured(study, 130.0, yours, label=True, config_key=config_key(yours))
    add_measured(study, 100.0, TrainConfig(mbs=2), label=True)
    study.set_user_attr(USERS_CONFIG, config_key(yours))
    text = printed(250, study_summary, study, study_ref("s", None, Path("r")), [])
    assert "1.00x your own config (dp=1, trial 0: the winner is your own config)" in text, text


@pytest.mark.parametrize("width", [80, 120])
def test_the_configs_table_fits_its_width_and_matches_its_golden(width: int) -> None:
    """`autotune trials` by default: a row per config, the winner first and marked, read at
    80 columns (once the trial number went blank and cells read "36,4…")."""
    text = printed(width, config_table, configs_of(units_study()), "deepspeed")
    assert all(len(line) <= width for line in text.splitlines()), text
    golden = GOLDEN / f"trials_{width}.txt"
    if os.environ.get("AUTOTUNE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()
    assert "★" in text and "40,213" in text and "oom" in text


@pytest.mark.parametrize("width", [80, 120])
def test_no_terminal_table_breaks_a_value_inside_it(width: int) -> None:
    """Every value a table shows appears whole on one line (a config may wrap between its
    knobs, never inside one)."""
    study = units_study()
    text = printed(width, config_table, configs_of(study), "deepspeed")
    values = ["40,213", "444.5 MiB", "47.7 GiB", "reduce_bucket=50M", "zero=2", "12.3 ms"]
    for value in values:
        assert value in text, (value, text)
    text = printed(width, trial_table, table_of(study), "deepspeed")
    for value in ["40,213", "12.3 ms"]:  # at 80 columns the launches' table drops columns
        assert value in text, (value, text)
    assert "…" not in text.replace("CUDA out of memory…", "").split("reason")[0]
