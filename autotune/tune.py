"""`autotune run` as a function that scripts and tests call: choose and check the launcher,
open or resume the study, search, export the best config and write the report. The CLI
only reads options into `TuneSettings` and prints what `tune` returns."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from rich.markup import escape

from autotune.calibration.saved import calibration_path, load_calibration, noise_path
from autotune.errors import InputError
from autotune.export import export_best
from autotune.launchers import LaunchSettings, check_settings, get_launcher
from autotune.launchers.base import Launcher
from autotune.launchers.slurm import SlurmLauncher
from autotune.model_probe import ModelRead, read_model
from autotune.nodes.check import nodes_needed, preflight
from autotune.nodes.judge import NodeCheck
from autotune.problem import Problem
from autotune.study import Budget, StudyOutcome, StudyRef, open_study, run_study
from autotune.study.loop import Progress
from autotune.study.record.storage import default_study_name, masked_url, study_ref
from autotune.study.record.trial_attrs import NODE_CHECK, launched_through
from autotune.study.search.production import PRODUCTION, Production
from autotune.study.search.samplers import make_sampler
from autotune.study.settings import SearchSettings
from autotune.study.slice.confirm import say_slice, with_kept_error
from autotune.study.slice.trials import SliceSettings, check_trial_nodes
from autotune.study.trial_run import QuietProgress
from autotune.study.verdict.noise import (
    Spread,
    noise_kind,
    read_spread,
    remember_spread,
    save_spread,
)
from autotune.study.verdict.reference import reference_plan
from autotune.study.verdict.winner import decide
from autotune.trial.spec import StepPlan


@dataclass(frozen=True, kw_only=True)
class TuneSettings:
    """What `autotune run`'s options set, for `tune()`: each field names its flag."""

    budget: Budget
    """How many trials, for how long, and how hard leaders are confirmed (`--trials`,
    `--max-time`, `--timeout-per-trial`, `--thorough`, `--confirm`, `--early-stop-margin`)."""
    launcher: str = "local"
    """Where trials run: local (torchrun), slurm, simulate or replay (`--launcher`)."""
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    """Where and how trials run; the calibration is read from `results` for the cluster."""
    steps: StepPlan = field(default_factory=StepPlan)
    """How long each trial measures (`--measured-steps`, `--precision`)."""
    study_name: str | None = None
    """Default: <model>-<cluster>-<engine>."""
    storage: str | None = None
    """An Optuna storage URL; default: SQLite in the study's results folder."""
    results: Path = Path("results")
    """The results root: the study's folder, trial folders, calibrations (`--results`)."""
    sampler: str = "guided"
    """guided (the model proposes), tpe, gp, random or grid (`--sampler`)."""
    seed: int | None = None
    """Seed for the sampler's proposals (`--seed`)."""
    slice: SliceSettings | None = None
    """`--trial-nodes`: search trials on a slice, leaders confirmed at full size."""
    node_check: bool = True
    """Check the nodes before a study on SLURM and keep slow ones out (`--node-check`)."""


@dataclass(frozen=True)
class Tuned:
    """What a tuning run leaves: the study, how the search ended, and the files written."""

    study: optuna.Study
    ref: StudyRef
    outcome: StudyOutcome
    exported: tuple[Path, ...]
    """best/ files; none when no trial completed (any other export failure is raised)."""
    report: Path | None


def tune(
    problem: Problem,
    settings: TuneSettings,
    progress: Progress | None = None,
    say: Callable[[str], None] = lambda _line: None,
) -> Tuned:
    """Search `problem` with real (or simulated, or replayed) trials and export the winner;
    `progress` hears of each trial as it starts and ends, `say` gets the run's other lines."""
    problem, launcher, launch = _checked_launcher(problem, settings)
    name = settings.study_name or default_study_name(problem, launcher.source)
    ref = study_ref(name, settings.storage, settings.results)
    nodes = _check_nodes(problem, launcher, settings, ref, say)
    slice_error_file = calibration_path(settings.results, problem.cluster).with_suffix(
        ".slice.json"
    )
    read = None
    if problem.reads_model and launcher.source == "measured":
        read = _read_users_model(problem, launcher, ref, settings, say)
        problem = read.problem
    noise_file = noise_path(settings.results, problem.cluster, study_kind(problem))
    prior = read_spread(noise_file) if launcher.source == "measured" else None
    sampler = make_sampler(settings.sampler, settings.seed)
    study = open_study(ref, problem, sampler, launcher.trials_from())
    say(
        f"study [bold]{ref.name}[/] ({masked_url(ref.storage_url)}): {problem.engine.name} on "
        f"{problem.workload.name} / {problem.cluster.name}"
    )
    _remember(study, prior, nodes, settings.budget.production)
    launched_through(study, launcher.name)
    search = SearchSettings(
        budget=settings.budget,
        steps=settings.steps,
        strategy=settings.sampler,
        seed=settings.seed,
        calibration=launch.calibration,
        slice=with_kept_error(settings.slice, slice_error_file),
    )
    measured = (read.config, read.record) if read and read.record else None
    try:
        outcome = run_study(
            problem,
            study,
            ref=ref,
            launcher=launcher,
            progress=progress or QuietProgress(),
            settings=search,
            measured=measured,
        )
    finally:
        launcher.close()
    if launcher.source == "measured":
        save_spread(study, noise_file)
    if settings.slice is not None:
        say_slice(study, problem.cluster, slice_error_file, say)
    exported, report = _write_outputs(study, ref, outcome, say)
    return Tuned(study=study, ref=ref, outcome=outcome, exported=exported, report=report)


def _remember(
    study: optuna.Study,
    prior: Spread | None,
    nodes: NodeCheck | None,
    production: Production | None,
) -> None:
    """What this run brings the study: the cluster's between-trial spread from earlier
    studies, the node check, and the production run it tunes for."""
    if prior is not None:
        remember_spread(study, prior)
    if nodes is not None:
        study.set_user_attr(NODE_CHECK, nodes.as_dict())
    if production is not None:
        study.set_user_attr(PRODUCTION, production.as_attr())


def _check_nodes(
    problem: Problem,
    launcher: Launcher,
    settings: TuneSettings,
    ref: StudyRef,
    say: Callable[[str], None],
) -> NodeCheck | None:
    """The nodes a SLURM study may run on, checked, the slow ones kept out of its trials."""
    if not settings.node_check or not isinstance(launcher, SlurmLauncher):
        return None
    part = settings.slice
    full_size = part is None or part.confirm_full > 0
    needed = nodes_needed(problem.cluster, part.nodes if part else None, full_size)
    return preflight(problem.cluster, launcher, needed, ref.folder / "node_check", say)


def study_kind(problem: Problem) -> str:
    """The kind of study whose between-trial spread this one starts from."""
    framework = problem.job.framework if problem.job is not None else None
    return noise_kind(problem.engine.name, problem.workload, framework)


def _checked_launcher(
    problem: Problem, settings: TuneSettings
) -> tuple[Problem, Launcher, LaunchSettings]:
    """The launcher `settings` name, built with the cluster's calibration (in the settings
    returned) and checked; the problem narrowed to what it can run; or an InputError."""
    check_trial_nodes(settings.slice.nodes if settings.slice else None, problem.cluster)
    problem.enumerate().require_some()
    if problem.job is not None and settings.launcher in ("replay", "simulate"):
        raise InputError(
            f"--launcher {settings.launcher} does not run anything: your own command needs "
            "local or slurm"
        )
    calibration, _ = load_calibration(settings.results, problem.cluster, problem.engine.name)
    launch = dataclasses.replace(
        settings.launch,
        calibration=calibration,
        traits=problem.engine.traits,
        cluster=problem.cluster,
    )
    check_settings(launch)
    launcher = get_launcher(settings.launcher, launch)
    problem = launcher.narrow(problem)
    if launcher.source == "measured":
        problem.engine.check_runnable(problem.cluster)
        launcher.check(problem.cluster)
    return problem, launcher, launch


def _read_users_model(
    problem: Problem,
    launcher: Launcher,
    ref: StudyRef,
    settings: TuneSettings,
    say: Callable[[str], None],
) -> ModelRead:
    """The user's model read by a run of their config, as long as a reference run is (the
    study takes it as that run); says what was read."""
    read = read_model(
        problem,
        launcher,
        ref.folder / "model_probe",
        reference_plan(settings.steps),  # the run of the user's config: the reference's
        settings.budget.timeout_per_trial_s,
    )
    shape, w = read.shape, read.problem.workload
    say(
        f"model read from your script: {shape.parameters / 1e6:,.1f}M parameters, "
        f"about {w.num_layers} layers of width {w.hidden_size}, vocabulary {w.vocab_size}, "
        f"{w.seq_length} tokens a sequence, {w.precision} (--model skips reading it)"
    )
    return read


def _write_outputs(
    study: optuna.Study, ref: StudyRef, outcome: StudyOutcome, say: Callable[[str], None]
) -> tuple[tuple[Path, ...], Path | None]:
    """The best config's export (when a trial completed) and the report (when the run
    measured anything, or a run stopped before writing it did). A best/ autotune did not
    export is left as it is, and said so."""
    exported: list[Path] = []
    best = decide(study)
    if best is not None:
        try:
            exported = export_best(study, ref.folder / "best", force=True)
        except InputError as exc:  # a folder of the user's where best/ goes
            say(f"best config not exported: {escape(str(exc))}")
    report, path = None, ref.folder / "report.html"
    if outcome.ran or outcome.confirmations or (best is not None and not path.exists()):
        from autotune.report.html import write_report

        try:
            report = write_report(study, path)
        except InputError as exc:  # a file of the user's where the report goes
            say(f"report not written: {escape(str(exc))}")
    return tuple(exported), report
