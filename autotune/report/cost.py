"""Where a study's time went: each measured trial's wall time split into its phases, summed
over the study, with the idle time between trials, so the share spent measuring shows."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from autotune.study.record.trial_attrs import TrialAttrs
from autotune.units import human_duration

PHASE_NAMES = {
    "started": "launch",
    "imported": "imports",
    "initialized": "initialisation",
    "warmed_up": "warm-up",
    "measured": "measured steps",
    "profiled": "profiling",
    "finished": "result",
}
"""The worker's clock marks (`TrialResult.phases_s`), in the order they happen."""


@dataclass(frozen=True)
class StudyCost:
    trials: int
    """Trials with a phase split (measured ones that ran to their result, those whose loss
    left the user's among them)."""
    seconds: dict[str, float]
    """Seconds by phase over those trials, teardown (the rest of each trial's wall time)
    last."""
    idle_s: float
    """Wall time between trials of the study, in none of them."""

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def measured_share(self) -> float:
        return self.seconds.get("measured steps", 0.0) / self.total_s if self.total_s else 0.0


def study_cost(study: optuna.Study) -> StudyCost | None:
    """None when no trial recorded its phases (simulated, replayed, or none finished)."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
    seconds = dict.fromkeys([*PHASE_NAMES.values(), "teardown"], 0.0)
    counted = 0
    for t in done:
        attrs = TrialAttrs.of(t)
        phases, wall = attrs.phases_s, attrs.wall_s
        if not phases or wall is None:
            continue
        counted += 1
        for mark, value in phases.items():
            name = PHASE_NAMES.get(mark, mark)
            seconds[name] = seconds.get(name, 0.0) + value
        seconds["teardown"] += max(0.0, wall - sum(phases.values()))
    if not counted:
        return None
    spans = [
        (t.datetime_start, t.datetime_complete)
        for t in study.get_trials(deepcopy=False)
        if t.datetime_start is not None and t.datetime_complete is not None
    ]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    busy = sum((e - s).total_seconds() for s, e in spans)
    idle = max(0.0, (last - first).total_seconds() - busy)  # 0 with workers in parallel
    return StudyCost(trials=counted, seconds=seconds, idle_s=idle)


def cost_line(cost: StudyCost) -> str:
    """One line: the trials' time by phase as shares, and the idle time between trials."""
    shares = ", ".join(
        f"{name} {seconds / cost.total_s:.0%}" for name, seconds in cost.seconds.items() if seconds
    )
    return (
        f"time in {cost.trials} measured trial(s): {human_duration(cost.total_s)} ({shares}); "
        f"measuring {cost.measured_share:.0%}; idle between trials {human_duration(cost.idle_s)}"
    )
