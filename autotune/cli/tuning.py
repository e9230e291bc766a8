"""Commands of a study: tune it, list its trials, export its best config, report, watch."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autotune.cli import display, summary, trial_tables
from autotune.cli.app import cli
from autotune.cli.help import GroupedCommand, completing, lowered
from autotune.cli.options import (
    FiniteFloatRange,
    check_writable_folder,
    console,
    launcher_flags,
    launcher_groups,
    launcher_names,
    launcher_options,
    length_options,
    problem_options,
    results_option,
    sampler_names,
    storage_option,
    study_options,
)
from autotune.cli.run_settings import RunOptions, tune_settings
from autotune.problem import load_problem

if TYPE_CHECKING:
    from autotune.tune import Tuned


RUN_GROUPS = (
    ("The job", ("engine", "model", "cluster", "space", "users_config", "launcher")),
    ("Budget", ("n_trials", "max_time", "production", "timeout_per_trial", "thorough")),
    ("Search", ("sampler", "seed")),
    (
        "Measurement",
        (
            "measured_steps",
            "precision",
            "early_stop",
            "early_stop_margin",
            "confirm",
            "node_check",
        ),
    ),
    ("The study and its files", ("study_name", "storage", "results")),
    ("Tuning on a slice of the cluster", ("trial_nodes", "confirm_full", "scale_probes")),
    *launcher_groups(launcher_names()),
)
"""`autotune run`'s options as its help and the CLI reference group them."""


@cli.command(cls=GroupedCommand, groups=RUN_GROUPS)
@problem_options
@click.option(
    "--launcher",
    default="local",
    show_default=True,
    callback=lowered,
    shell_complete=completing(launcher_names),
    help="local (torchrun), slurm (sbatch jobs, or srun steps inside an allocation), "
    "simulate (the model's predictions) or replay (a recorded sweep).",
)
@launcher_options(launcher_names)
@click.option(
    "--trials",
    "n_trials",
    default=None,
    type=click.IntRange(min=1),
    help="Trials to run in the study, counting those of earlier runs [default: 8; 4 for your "
    "own command, each trial of which relaunches your whole job; with --thorough 200 and "
    "100].",
)
@click.option("--max-time", default=None, help="Start no trial after this long, e.g. 30m, 2h.")
@click.option(
    "--production",
    default=None,
    help="The production run the winner will train, e.g. 14d or 250000 steps: the search "
    "stops once another trial is expected to cost more GPU-hours than it saves over it, and "
    "the summary states what tuning cost and saves.",
)
@click.option(
    "--timeout-per-trial",
    default="10m",
    show_default=True,
    help="Wall-clock limit of one trial, e.g. 300s, 10m.",
)
@click.option(
    "--study", "study_name", default=None, help="Study name [default: <model>-<cluster>-<engine>]."
)
@storage_option
@results_option
@click.option(
    "--sampler",
    default="guided",
    show_default=True,
    callback=lowered,
    shell_complete=completing(sampler_names),
    help="guided (the model proposes), tpe, gp, random or grid.",
)
@click.option(
    "--seed",
    default=None,
    type=click.IntRange(0, 2**32 - 1),
    help="Seed for reproducible proposals (0 to 2^32-1).",
)
@click.option(
    "--early-stop/--no-early-stop",
    default=True,
    show_default=True,
    help="Stop measuring a trial once it is surely slower than the best so far by "
    "--early-stop-margin.",
)
@click.option(
    "--confirm/--no-confirm",
    default=True,
    show_default=True,
    help="Re-measure leaders within noise with longer trials before naming one.",
)
@click.option(
    "--thorough",
    is_flag=True,
    help="For a noisy cluster: search until few configs are left that could beat the best "
    "(together, not each alone) and repeat up to 16 leaders up to 40 times each, for "
    "several times the default's trial time.",
)
@click.option(
    "--early-stop-margin",
    default=0.10,
    show_default=True,
    type=FiniteFloatRange(0),
    help=(
        "How much slower than the best a trial must surely be to stop early, as a fraction; "
        "raised to what two launches of one config differ by."
    ),
)
@click.option(
    "--trial-nodes",
    default=None,
    type=int,
    help="Run search trials on this many nodes of the cluster (same layout, fewer "
    "data-parallel replicas) and rank configs for the whole cluster by extrapolation; "
    "must divide the cluster's nodes [default: the whole cluster].",
)
@click.option(
    "--confirm-full",
    default=2,
    show_default=True,
    type=click.IntRange(0),
    help="With --trial-nodes: leaders measured at full size before export, the winner "
    "chosen and repeated there (its figures from those launches); 0 skips them, and the "
    "figures are the slice's extrapolation.",
)
@click.option(
    "--scale-probes",
    default=4,
    show_default=True,
    type=click.IntRange(0),
    help="With --trial-nodes and --confirm-full: the slice's best leaders measured again "
    "on twice its nodes when the search would first stop, to learn how data-parallel "
    "traffic slows as the nodes grow (the search goes on under it, and the leaders are "
    "confirmed by it); 0 skips them.",
)
@click.option(
    "--users-config",
    default="",
    help="The knobs your own command runs today, e.g. mbs=4,ddp_bucket_mb=25, where autotune "
    "cannot read them from it (a loop tuned through autotune.step, Megatron-LM, torchtitan): "
    "the config every other is judged against for loss parity [default: the space file's "
    "`yours:`].",
)
@click.option(
    "--node-check/--no-node-check",
    default=True,
    show_default=True,
    help="slurm: before the study, time compute, memory and links on every node its trials "
    "may land on, and keep a node well outside its peers out of them (`autotune nodes` "
    "runs the check alone).",
)
@length_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(**options: Any) -> None:
    """Tune: search the space with real trials, then export the best config.

    After `--`, your own training command: a DeepSpeed or Hugging Face script (`-- train.py
    --deepspeed_config ds.json ...`), each trial with a ds_config made from yours; with
    --engine megatron, a Megatron-LM script (`-- pretrain_gpt.py ...`), its parallel, batch,
    recompute and overlap flags replaced; with --engine torch, torchtitan (`-- -m
    torchtitan.train ...`, the model given by --model) or, with --space, any loop that
    calls autotune.step.done().
    """
    from autotune.tune import tune

    flags = launcher_flags(options, launcher_names())
    run_options = RunOptions(**options, launcher_flags=flags)
    problem = load_problem(
        run_options.engine,
        run_options.model,
        run_options.cluster,
        run_options.space,
        run_options.command,
        run_options.users_config,
    )  # its cluster file's launcher sections are checked by `tune`, with the flags
    settings = tune_settings(problem, run_options)
    check_writable_folder(run_options.results, "--results")
    tuned = tune(problem, settings, display.RichProgress(console), console.print)
    _print_outcome(tuned)
    if not tuned.exported:
        sys.exit(1)  # no trial succeeded (or best/ is a folder of the user's): nothing to use


def _print_outcome(tuned: Tuned) -> None:
    """How the search ended, the study's summary, and where its report is."""
    if tuned.outcome.resumed_failed:
        console.print(
            f"resumed: trial(s) {tuned.outcome.resumed_failed} of a run that died are "
            "recorded as failed (interrupted)"
        )
    console.print(f"stopped: {tuned.outcome.stop_reason}")
    summary.study_summary(console, tuned.study, tuned.ref, list(tuned.exported))
    if tuned.report is not None:
        console.print(f"report: {tuned.report}")


@cli.command(name="trials")
@study_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format: a table, CSV or JSON (CSV and JSON: a row per launch, raw numbers).",
)
@click.option("--launches", is_flag=True, help="A row per launch (trial) rather than per config.")
def trials_command(
    study_name: str, storage: str | None, results: Path, fmt: str, launches: bool
) -> None:
    """Every config of a study, the winner first (--launches: every launch, best first)."""
    from autotune.report import trial_table
    from autotune.report.configs import config_table
    from autotune.study import load_existing_study
    from autotune.study.record.storage import study_ref

    study = load_existing_study(study_ref(study_name, storage, results))
    by_launch = launches or fmt != "table"
    frame = trial_table(study) if by_launch else config_table(study)
    if fmt == "csv":
        click.echo(frame.to_csv(index=False), nl=False)
    elif fmt == "json":
        click.echo(frame.to_json(orient="records", indent=2))
    elif by_launch:
        trial_tables.trial_table(console, frame, study.user_attrs.get("engine"))
    else:
        trial_tables.config_table(console, frame, study.user_attrs.get("engine"))


@cli.command()
@study_options
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Output folder [default: results/<study>/best].",
)
@click.option("--force", is_flag=True, help="Replace a folder autotune exported before.")
def export(
    study_name: str, storage: str | None, results: Path, out: Path | None, force: bool
) -> None:
    """Write the best config's launch files."""
    from autotune.export import export_best
    from autotune.study import load_existing_study
    from autotune.study.record.storage import study_ref

    ref = study_ref(study_name, storage, results)
    study = load_existing_study(ref)
    check_writable_folder(out or ref.folder / "best", "--out")
    for path in export_best(study, out or ref.folder / "best", force=force):
        console.print(str(path))


@cli.command()
@study_options
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="HTML file [default: results/<study>/report.html].",
)
@click.option("--force", is_flag=True, help="Replace a file that is not an autotune report.")
def report(
    study_name: str, storage: str | None, results: Path, out: Path | None, force: bool
) -> None:
    """Write the study's self-contained HTML report (an earlier one at --out is replaced)."""
    from autotune.report.html import write_report
    from autotune.study import load_existing_study
    from autotune.study.record.storage import study_ref

    ref = study_ref(study_name, storage, results)
    study = load_existing_study(ref)
    out = out or ref.folder / "report.html"
    check_writable_folder(out.parent, "--out")
    console.print(str(write_report(study, out, force=force)))
