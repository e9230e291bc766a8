"""Stopping a trial that is clearly slower than the best so far, from its streamed step times.

The worker appends each step's time to metrics.jsonl as it goes. A one-sided sign test asks
whether the measured steps' median exceeds the bar (the best step time so far, plus a
margin): when k of n steps are slower than the bar and P(X >= k | n, 1/2) < alpha, the trial
is stopped. One slow step never stops a trial; three fast ones never do either.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from autotune.trial.spec import METRICS_FILE


@dataclass(frozen=True)
class EarlyStop:
    bar_s: float
    """Step time above which a step counts as slower: best so far x (1 + margin)."""
    alpha: float = 0.05
    min_steps: int = 3

    def evidence(self, step_times: list[float]) -> str | None:
        """Why to stop, or None while the steps do not show the trial is slower."""
        n = len(step_times)
        if n < self.min_steps:
            return None
        slower = sum(1 for t in step_times if t > self.bar_s)
        p = sum(math.comb(n, k) for k in range(slower, n + 1)) / 2**n
        if p >= self.alpha:
            return None
        return (
            f"stopped early: {slower} of {n} measured steps slower than {self.bar_s:.4g} s "
            f"(the best so far plus the margin); sign test p={p:.3f}"
        )


def measured_step_times(folder: Path) -> list[float]:
    """Measured-phase step times the worker has streamed so far (partial lines skipped)."""
    path = folder / METRICS_FILE
    if not path.exists():
        return []
    times = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("phase") == "measured":
            times.append(float(record["step_time_s"]))
    return times
