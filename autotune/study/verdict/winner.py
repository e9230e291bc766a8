"""Who won, decided once: the winner's standing and figures, and the config the export writes
(the winner, or its layout with NCCL's defaults: `nccl_verdict`), named alike by the summary,
the report, best.yaml, train.sh, train.sbatch and nccl.env.

The winner is named by the trial that chose it (its first), with the trials its figures come
from where those are others (its repeats after its choice): "trial 0; figures from trials
24-25". Its latest measurement is what the export's files are written from."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from autotune.study.verdict._nccl_verdict import nccl_verdict
from autotune.study.verdict.confirm import Standing, standings
from autotune.study.verdict.figures import Figures, winner_figures


@dataclass(frozen=True)
class Verdict:
    figures: Figures
    """The winner's figures (`figures.best` is its standing)."""
    exported: Standing
    """The config the export writes: the winner, or the best layout with NCCL's defaults."""
    nccl_note: str | None
    """What nccl.env says of the NCCL settings (None: the winner uses NCCL's defaults)."""

    @property
    def winner(self) -> Standing:
        return self.figures.best

    @property
    def trial(self) -> FrozenTrial:
        """The exported config's latest measurement, which its files are written from."""
        return self.exported.trial

    @property
    def figure_trials(self) -> tuple[int, ...]:
        """The trials the exported config's figures come from."""
        if self.exported is self.winner:
            return self.figures.basis.numbers
        return self.exported.numbers

    def figures_from(self) -> str | None:
        """ "trials 24-25": where the exported config's figures come from, where those are
        not the trial that chose it alone; else None."""
        numbers = self.figure_trials
        if not numbers or numbers == (self.exported.first,):
            return None
        return trials_text(numbers)

    def winner_figures_text(self) -> str:
        """Where the winner's figures come from, as the summary and report say it: "trials
        24-25: repeats taken after it was chosen"."""
        numbers = self.figures.basis.numbers
        return f"{trials_text(numbers)}: {self.figures.method}" if numbers else self.figures.method

    def name(self) -> str:
        """The exported config as every file names it: "trial 0", or "trial 0; figures from
        trials 24-25"."""
        where = self.figures_from()
        first = f"trial {self.exported.first}"
        return f"{first}; figures from {where}" if where else first


def trials_text(numbers: tuple[int, ...]) -> str:
    """ "trial 3", "trials 24-25" (consecutive) or "trials 3, 7 and 9"."""
    if len(numbers) == 1:
        return f"trial {numbers[0]}"
    ordered = sorted(numbers)
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"trials {ordered[0]}-{ordered[-1]}"
    return f"trials {', '.join(map(str, ordered[:-1]))} and {ordered[-1]}"


def decide(study: optuna.Study) -> Verdict | None:
    """The study's verdict; None before any config completed."""
    figures = winner_figures(study)
    if figures is None:
        return None
    winner = figures.best
    nccl = nccl_verdict(study, winner.trial)
    if nccl.trial.number == winner.trial.number:
        return Verdict(figures, winner, nccl.note)
    found = next((s for s in standings(study) if s.trial.number == nccl.trial.number), winner)
    return Verdict(figures, found, nccl.note)
