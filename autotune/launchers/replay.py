"""The replay launcher: a recorded sweep as the world, for benchmarking search strategies.

The table (CSV) has one row per config: knob names as columns, `step_time_s`, and `status`
(`ok`, or the outcome kind of a config that failed). It defines the space: the valid configs
are its rows. Results are labelled `replayed`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as settings_dataclass

from autotune.errors import InputError
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest, LaunchSettings
from autotune.launchers.settings import LauncherOption
from autotune.problem import Problem
from autotune.space import KNOBS, Rule, SearchSpace, TrainConfig, config_key
from autotune.space.config import coerce_knob
from autotune.specs.throughput import throughput
from autotune.trial.result import TrialResult
from autotune.trial.spec import OUTCOMES, TRIAL_FILE, TrialSpec


@settings_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class ReplaySettings:
    table: Path | None = None
    """The recorded sweep (CSV)."""


@dataclass(frozen=True)
class ReplayTable:
    rows: dict[str, dict[str, Any]] = field(hash=False)
    """Config key -> the recorded row."""
    values: dict[str, tuple[Any, ...]] = field(hash=False)
    """Knob -> the values the table holds: the search space it defines."""
    source: str = ""

    def rule(self) -> Rule:
        return Rule(
            "recorded_in_table",
            "replay runs only configs the table recorded",
            lambda c, _w, _k: config_key(c) in self.rows,
        )


MAX_TABLE_BYTES = 16 << 20
"""A recorded sweep is a row per config: tens of thousands of rows are a few MB. A 100 MB
file once ran for minutes at 2.6 GB before anything was said."""


def load_table(path: Path) -> ReplayTable:
    try:
        size = path.stat().st_size
        if size > MAX_TABLE_BYTES:
            raise InputError(
                f"replay table {path}: {size / 2**20:,.0f} MiB, larger than the "
                f"{MAX_TABLE_BYTES >> 20} MiB a recorded sweep needs"
            )
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"replay table {path}: cannot read: {exc}") from None
    knobs = [c for c in frame.columns if c in KNOBS]
    missing = {"step_time_s", "status"} - set(frame.columns)
    if missing or not knobs:
        raise InputError(
            f"replay table {path}: needs knob columns, step_time_s and status "
            f"(missing {', '.join(sorted(missing)) or 'knob columns'})"
        )
    rows: dict[str, dict[str, Any]] = {}
    for record in frame.to_dict("records"):
        if record["status"] not in OUTCOMES:
            raise InputError(f"replay table {path}: unknown status {record['status']!r}")
        knob_values = {k: coerce_knob(k, record[k], str(path)) for k in knobs}
        rows[config_key(TrainConfig(**knob_values))] = record
    values = {
        k: tuple(dict.fromkeys(coerce_knob(k, v, str(path)) for v in frame[k]))
        for k in knobs
        if k != "dp"
    }
    return ReplayTable(rows=rows, values=values, source=str(path))


class ReplayLauncher(Launcher):
    name = "replay"
    source = "replayed"
    settings_type = ReplaySettings
    options = (
        LauncherOption(
            "--table", "table", "replay: the recorded sweep (CSV) it replays.", file=True
        ),
    )

    def __init__(self, table: ReplayTable) -> None:
        self.table = table

    @classmethod
    def build(cls, settings: LaunchSettings) -> ReplayLauncher:
        table = settings.of(cls).table
        if table is None:
            raise InputError("--launcher replay needs --table FILE.csv (a recorded sweep)")
        return cls(load_table(table))

    def trials_from(self) -> str:
        return f"replayed {Path(self.table.source).resolve()}"

    def narrow(self, problem: Problem) -> Problem:
        """The problem restricted to the table's configs: the space is its rows."""
        space = SearchSpace(
            engine=problem.engine.name, values=self.table.values, source=self.table.source
        )
        return dataclasses.replace(problem, space=space, extra_rules=(self.table.rule(),))

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", f"replayed from the recorded sweep {self.table.source}"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        row = self.table.rows.get(config_key(spec.config))
        if row is None:
            return LaunchOutcome(
                kind="launch_error",
                wall_s=0.0,
                error="replay: the table has no row for this config",
            )
        wall = float(row.get("wall_s", 0.0) or 0.0)
        if row["status"] != "ok":
            return LaunchOutcome(
                kind=row["status"], wall_s=wall, error=f"replayed: recorded as {row['status']}"
            )
        step = float(row["step_time_s"])
        w, cluster = spec.workload, spec.cluster
        rate = throughput(w, cluster, step)
        result = TrialResult(
            source="replayed",
            step_time_s=step,
            step_time_stdev_s=float(row.get("step_time_stdev_s", 0.0) or 0.0),
            tokens_per_s=rate.tokens_per_s,
            tflops_per_device=rate.tflops_per_device,
            mfu=rate.mfu,
            peak_memory_bytes=row.get("peak_memory_bytes"),
            model_state_bytes=row.get("model_state_bytes"),
            replayed_at=time.time(),
        )
        result.write(request.folder)
        return LaunchOutcome(kind="ok", error=None, wall_s=wall, result=result)
