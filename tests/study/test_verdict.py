"""One verdict read everywhere: a normal, a slice and a `--thorough` study each name the same
winner, with the trials its figures come from, in the summary, report.html, best.yaml,
train.sh, train.sbatch and nccl.env (the export once named the winner's last repeat instead
of the trial that chose it)."""

from __future__ import annotations

import dataclasses
import io
import math
from pathlib import Path

import optuna
import pytest
import yaml
from rich.console import Console

from autotune.cli.summary import study_summary
from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.export.best import export_best
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.problem import Problem, load_problem
from autotune.report.html import write_report
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef, problem_attrs, study_ref
from autotune.study.record.trial_attrs import AFTER_CHOICE
from autotune.study.settings import Budget, SearchSettings
from autotune.study.slice.trials import SliceSettings
from autotune.study.verdict.effort import STANDARD, THOROUGH, Effort
from autotune.study.verdict.winner import decide, trials_text
from autotune.trial.spec import TRIAL_FILE, TrialSpec
from tests.fakes import Quiet, measured_outcome, new_study


class Noisy(Launcher):
    """A measured cluster: a config's step time follows its micro-batch, launches land 5%
    apart in turn, and the whole job runs at 40% of what a slice extrapolates to."""

    name = "noisy"
    source = "measured"

    def __init__(self, full_nodes: int) -> None:
        self.full_nodes, self.launches = full_nodes, 0

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "noisy"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        self.launches += 1
        step = (1.0 + 0.02 * spec.config.mbs) * (
            2.5 if spec.cluster.nodes == self.full_nodes else 1
        )
        step *= math.exp(0.05 if self.launches % 2 else -0.05)
        return measured_outcome(request, spec, step)


def _study(problem: Problem, tmp_path: Path, effort: Effort, sliced: bool) -> optuna.Study:
    study = new_study(between=0.05)
    for key, value in problem_attrs(problem).items():
        study.set_user_attr(key, value)
    run_study(
        problem,
        study,
        ref=StudyRef("s", "memory", tmp_path),
        launcher=Noisy(problem.cluster.nodes),
        progress=Quiet(),
        settings=SearchSettings(
            budget=Budget(trials=3, effort=effort),
            calibration=DEFAULT_CALIBRATION["hopper"],
            slice=SliceSettings(1, confirm_full=1) if sliced else None,
        ),
    )
    return study


@pytest.mark.parametrize(
    ("effort", "sliced"),
    [(STANDARD, False), (STANDARD, True), (THOROUGH, False)],
    ids=["normal", "slice", "thorough"],
)
def test_every_output_names_the_same_winner_and_the_trials_its_figures_come_from(
    tmp_path: Path, effort: Effort, sliced: bool
) -> None:
    problem = load_problem("megatron", "llama3-8b", "dgx-h100:4", None)
    slurm = dataclasses.replace(problem.cluster, launcher_sections={"slurm": {"qos": "high"}})
    problem = dataclasses.replace(problem, cluster=slurm)  # a SLURM cluster: train.sbatch
    study = _study(problem, tmp_path, effort, sliced)
    verdict = decide(study)
    assert verdict is not None and verdict.exported is verdict.winner
    after = [t.number for t in study.trials if t.user_attrs.get(AFTER_CHOICE)]
    assert after and verdict.figure_trials == tuple(after)
    first, repeats = verdict.winner.first, trials_text(tuple(after))
    assert first not in after and verdict.name() == f"trial {first}; figures from {repeats}"

    export_best(study, tmp_path / "best")
    best = tmp_path / "best"
    assert (
        f", trial {first}; figures from {repeats} (measured: " in (best / "train.sh").read_text()
    )
    sbatch = (best / "train.sbatch").read_text()
    assert f", trial {first}; figures from {repeats}, on " in sbatch and "--qos=high" in sbatch
    assert f"NCCL settings of study trial {first} " in (best / "nccl.env").read_text()
    provenance = yaml.safe_load((best / "best.yaml").read_text())["provenance"]
    assert (provenance["trial"], provenance["figures_from_trials"]) == (first, after)

    out = io.StringIO()
    study_summary(Console(file=out, width=300), study, study_ref("s", None, tmp_path), [])
    summary = out.getvalue()
    assert f"best: trial {first} " in summary and f"figures from {repeats}: " in summary
    write_report(study, tmp_path / "report.html")
    report = (tmp_path / "report.html").read_text()
    assert f"Winner: trial {first}," in report and f"figures from {repeats}: " in report
