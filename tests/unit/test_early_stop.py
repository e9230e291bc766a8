"""The sign test that stops clearly slower trials, and reading streamed step times."""

import json
from pathlib import Path

from autotune.launchers.early_stop import EarlyStop, measured_step_times

BAR = EarlyStop(bar_s=1.0)


def test_needs_enough_steps_all_clearly_slower() -> None:
    assert BAR.evidence([2.0, 2.0]) is None  # too few steps
    assert BAR.evidence([2.0, 2.0, 2.0, 2.0]) is None  # p = 1/16 > 0.05
    evidence = BAR.evidence([2.0] * 5)  # p = 1/32
    assert evidence is not None and "5 of 5" in evidence and "p=0.031" in evidence


def test_one_slow_step_never_stops_a_trial() -> None:
    assert BAR.evidence([0.9, 0.95, 5.0, 0.9, 0.92, 0.94, 0.9, 0.93]) is None
    assert BAR.evidence([1.2, 0.9, 1.3, 0.95, 1.1, 0.9]) is None  # 3 of 6 slower


def test_mostly_slower_with_more_steps() -> None:
    assert BAR.evidence([1.5, 1.4, 0.9, 1.6, 1.5, 1.7, 1.4, 1.5]) is not None  # 7 of 8


def test_reads_only_measured_steps_and_skips_a_partial_line(tmp_path: Path) -> None:
    lines = [
        json.dumps({"phase": "warmup", "step": 0, "step_time_s": 9.0}),
        json.dumps({"phase": "measured", "step": 0, "step_time_s": 1.5}),
        json.dumps({"phase": "measured", "step": 1, "step_time_s": 1.25}),
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"phase": "meas')
    assert measured_step_times(tmp_path) == [1.5, 1.25]
    assert measured_step_times(tmp_path / "missing") == []
