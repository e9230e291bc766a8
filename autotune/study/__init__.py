"""The search loop over an ordinary Optuna study: storage, sampling, resume, budgets."""

from autotune.study.loop import COMMAND_TRIALS, Budget, StudyOutcome, run_study
from autotune.study.storage import StudyRef, load_existing_study, open_study

__all__ = [
    "COMMAND_TRIALS",
    "Budget",
    "StudyOutcome",
    "StudyRef",
    "load_existing_study",
    "open_study",
    "run_study",
]
