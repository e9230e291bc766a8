"""What one run of the search loop is given and what it gives back: its budget, how it
searches, and its outcome."""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.estimate.calibration import Calibration
from autotune.study.search.production import Production
from autotune.study.slice.trials import SliceSettings
from autotune.study.verdict.effort import STANDARD, Effort
from autotune.trial.spec import StepPlan

COMMAND_TRIALS = 4
"""The default trial budget when the trials run the user's own command: each relaunches their
whole job (imports, model, data, framework initialisation), so the model's best and the
configs it is least sure of are measured, about as many as DeepSpeed's autotuner's fast mode
runs; `--trials` asks for more, and a resumed study counts the trials it has."""


@dataclass(frozen=True)
class Budget:
    trials: int | None = 8
    """Trials that ran in the study, counting those of earlier runs; None: no budget (the
    stop rule, the space or `max_time_s` ends the search)."""
    max_time_s: float | None = None
    """No new trial starts once this run has lasted this long."""
    timeout_per_trial_s: float = 600.0
    early_stop_margin: float | None = 0.10
    """Stop measuring a trial once its step time is surely slower than the best so far by
    this fraction, or by what two launches differ by where that is more
    (`noise.early_stop_margin`, `trial.length`); None turns early stopping off."""
    confirm: bool = True
    """Re-measure leaders within noise of each other with longer trials before naming one."""
    effort: Effort = STANDARD
    """When the guided search stops and how many leaders are repeated how often."""
    production: Production | None = None
    """The production run the study tunes for: the guided search stops once another trial
    does not pay over it (`economics`)."""


@dataclass(frozen=True)
class StudyOutcome:
    ran: int
    """Trials run by this invocation."""
    finished_total: int
    stop_reason: str
    resumed_failed: list[int] = field(default_factory=list)
    confirmations: list[int] = field(default_factory=list)
    """Trials that re-measured the leaders (see study.verdict.confirm)."""


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How one run of the loop searches: its budget, trial length and proposer."""

    budget: Budget = field(default_factory=Budget)
    steps: StepPlan = field(default_factory=StepPlan)
    strategy: str = "guided"
    """"guided" (the model proposes), "grid" (enumeration order) or an Optuna sampler's name
    (the study's sampler proposes)."""
    seed: int | None = None
    calibration: Calibration | None = None
    seed_from_plan: bool = True
    """With an Optuna sampler, run the plan's best configs first in a new study."""
    slice: SliceSettings | None = None
    """Trials on a slice of the cluster, leaders confirmed at full size (`study.slice`)."""
