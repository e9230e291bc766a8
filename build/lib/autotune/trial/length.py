"""How long a trial measures: until its step time is known well enough for the decision it
feeds, no longer.

After each measured step (at least `min_measured`) the interval of the mean step time decides:
- `slower`: its median, and the whole of a strict one-sided interval, lie above the best step
  time so far plus the margin: it cannot win;
- `precise`: its 95% interval is within `precision` of its median, or, for a trial slower
  than the best, within half its distance from it (a trial 10% slower is ranked by a 5%
  interval; one close to the best or faster, which could win, measures on to the full
  precision);
- otherwise it goes on, up to `measured_steps` (`cap`).
A trial of a user's command whose loss has left the user's config's (`differs`) stops once it
has `min_measured` steps: its speed still informs the search, and it cannot be exported.
One slow step widens the interval instead of deciding anything: it never stops a trial as
slower, and it keeps a trial measuring.
"""

from __future__ import annotations

import math
import statistics
from typing import Literal

from scipy.special import stdtrit

from autotune.confidence import INTERVAL_TWO_SIDED_PROBABILITY, SLOWER_ONE_SIDED_PROBABILITY
from autotune.trial.spec import StepPlan

StoppedFor = Literal["precise", "slower", "cap", "differs"]


def _t(degrees: int, level: float) -> float:
    return float(stdtrit(degrees, level))


def relative_halfwidth(
    times: list[float] | tuple[float, ...], level: float = 0.5 + INTERVAL_TWO_SIDED_PROBABILITY / 2
) -> float:
    """Half the two-sided 95% interval of the mean step time (or the one-sided bound at
    `level`), as a share of the median; inf with fewer than two steps."""
    if len(times) < 2:
        return math.inf
    half = _t(len(times) - 1, level) * statistics.stdev(times) / math.sqrt(len(times))
    return half / statistics.median(times)


def stopped_for(times: list[float], plan: StepPlan) -> StoppedFor | None:
    """Why measuring can stop after these measured steps, or None to go on."""
    n = len(times)
    if n < plan.min_measured:
        return "cap" if n >= plan.measured_steps else None
    median = statistics.median(times)
    if plan.best_s is not None and plan.margin is not None:
        bar = plan.best_s * (1 + plan.margin)
        half = relative_halfwidth(times, SLOWER_ONE_SIDED_PROBABILITY) * median
        lower = statistics.fmean(times) - half
        if median > bar and lower > bar:
            return "slower"
    gap = median / plan.best_s - 1 if plan.best_s else 0.0  # only a slower trial is let off
    if plan.precision > 0 and relative_halfwidth(times) <= max(plan.precision, gap / 2):
        return "precise"
    return "cap" if n >= plan.measured_steps else None
