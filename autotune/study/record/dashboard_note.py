"""The markdown note each trial carries in optuna-dashboard: its config, measured and
predicted breakdowns side by side, and the error line of a failure. The study writes it
when it tells a trial's outcome."""

from __future__ import annotations

from typing import Any

from autotune.space import TrainConfig
from autotune.study.record.trial_attrs import Prediction
from autotune.trial.result import TrialResult
from autotune.units import display_label

GIB = 2**30
COMMUNICATION_PARTS = ("tp_comm_s", "pp_p2p_s", "cp_comm_s", "ep_comm_s", "dp_exposed_s")
"""The predicted step's parts that are exposed communication."""


def _row(name: str, measured: str, predicted: str) -> str:
    return f"| {name} | {measured} | {predicted} |"


def _seconds(value: Any) -> str:
    return f"{value * 1e3:.1f} ms" if isinstance(value, int | float) else "-"


def _gib(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / 2**20:.1f} MiB"


def trial_note(
    config: TrainConfig,
    kind: str,
    source: str,
    error: str | None,
    result: TrialResult | None,
    predicted: Prediction | None,
) -> str:
    """Markdown for optuna-dashboard's trial note."""
    profile = (result.profile if result else None) or {}
    step = predicted.step if predicted is not None else {}
    lines = [
        f"**{kind}** ({source}) `{display_label(config)}`",
        "",
        "| | measured | predicted |",
        "|---|---|---|",
        _row(
            "step time",
            _seconds(result.step_time_s if result else None),
            _seconds(step.get("total_s")),
        ),
        _row("compute", _seconds(profile.get("compute_s")), _seconds(step.get("compute_s"))),
        _row(
            "communication",
            _seconds(profile.get("comm_s")),
            _seconds(sum(step.get(k, 0.0) for k in COMMUNICATION_PARTS) if step else None),
        ),
        _row("pipeline bubble", "-", _seconds(step.get("pp_bubble_s"))),
        _row(
            "peak memory",
            _gib(result.peak_memory_bytes if result else None),
            _gib(predicted.memory_bytes if predicted is not None else None),
        ),
        _row("model states", _gib(result.model_state_bytes if result else None), "-"),
    ]
    if error:
        lines += ["", "```", error, "```"]
    return "\n".join(lines) + "\n"
