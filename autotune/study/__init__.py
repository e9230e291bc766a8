"""The search loop over an ordinary Optuna study: storage, sampling, resume, budgets."""

from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef, load_existing_study, open_study
from autotune.study.settings import COMMAND_TRIALS, Budget, StudyOutcome

__all__ = [
    "COMMAND_TRIALS",
    "Budget",
    "StudyOutcome",
    "StudyRef",
    "load_existing_study",
    "open_study",
    "run_study",
]
