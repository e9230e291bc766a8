"""Where a study's time went: phases summed over measured trials, idle time between them."""

from __future__ import annotations

from datetime import datetime, timedelta

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.report.cost import cost_line, study_cost

T0 = datetime(2026, 12, 1, 8, 0, 0)
PHASES = {"started": 2.0, "imported": 0.0, "initialized": 5.0, "warmed_up": 3.0,
          "measured": 8.0, "profiled": 1.0, "finished": 0.5}  # fmt: skip


def trial(number: int, start_s: float, wall_s: float, attrs: dict[str, object]) -> FrozenTrial:
    return FrozenTrial(
        number=number, state=TrialState.COMPLETE, value=1.0,
        datetime_start=T0 + timedelta(seconds=start_s),
        datetime_complete=T0 + timedelta(seconds=start_s + wall_s),
        params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
        user_attrs=attrs, system_attrs={}, intermediate_values={}, trial_id=number,
    )  # fmt: skip


def test_two_trials_split_into_phases_with_the_gap_between_them_idle() -> None:
    study = optuna.create_study(direction="maximize")
    study.add_trial(trial(0, 0.0, 20.0, {"phases_s": PHASES, "wall_s": 20.0}))
    study.add_trial(trial(1, 25.0, 20.0, {"phases_s": PHASES, "wall_s": 20.0}))
    cost = study_cost(study)
    assert cost is not None and cost.trials == 2
    assert cost.seconds["measured steps"] == 16.0
    assert cost.seconds["teardown"] == 2 * (20.0 - 19.5)
    assert cost.idle_s == 5.0
    assert cost.measured_share == 16.0 / 40.0
    assert "measuring 40%" in cost_line(cost) and "idle between trials 5.0 s" in cost_line(cost)


def test_a_simulated_study_has_no_phase_split() -> None:
    study = optuna.create_study(direction="maximize")
    study.add_trial(trial(0, 0.0, 0.1, {"source": "simulated"}))
    assert study_cost(study) is None
