"""The `autotune` command: parse, call, print. Errors become one line and exit code 2."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import signal
import sys
import warnings
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from autotune import display
from autotune.commbench import OPS as COLLECTIVES
from autotune.errors import AutotuneError, InputError
from autotune.problem import load_problem, problem_from_trial_file
from autotune.space import parse_overrides
from autotune.specs.cluster import Cluster, SlurmSettings

# Tables stay readable when output goes to a file or pipe (80 columns otherwise).
console = Console(soft_wrap=True, width=shutil.get_terminal_size((140, 40)).columns)


def _quiet_optuna() -> None:
    """autotune prints its own progress; Optuna's info log and its warnings about running
    heartbeats outside Study.optimize (which ask-and-tell needs) are noise here."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


results_option = click.option(
    "--results",
    type=click.Path(path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Results root: studies, trial folders, saved calibrations.",
)


def problem_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--engine, --model, --cluster and --space, shared by every command that plans or runs."""
    options = [
        click.option(
            "--engine",
            default="deepspeed",
            show_default=True,
            help="Training engine: deepspeed, torch or megatron.",
        ),
        click.option(
            "--model",
            default="tiny",
            show_default=True,
            help="Workload preset (tiny, gpt-1.3b, llama3-8b, ...) or YAML file.",
        ),
        click.option(
            "--cluster",
            default="local",
            show_default=True,
            help="Cluster preset (local, local:N, dgx-h100:16, ...) or YAML file.",
        ),
        click.option("--space", default=None, help="Search-space file [default: the engine's]."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="autotune")
def cli() -> None:
    """Find the fastest way to run a training job on a cluster."""


@cli.command()
@problem_options
@click.option("--sample", default=5, show_default=True, help="Valid configs to show.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable output.")
def space(
    engine: str, model: str, cluster: str, space: str | None, sample: int, as_json: bool
) -> None:
    """Count and explain the valid configs of a search space."""
    problem = load_problem(engine, model, cluster, space)
    found = problem.enumerate().require_some()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "total": found.total,
                    "valid": len(found.valid),
                    "removed_by_rule": found.removed,
                    "knobs": {
                        knob: {
                            "values": list(values),
                            "meaning": problem.engine.knob_meanings.get(knob, ""),
                        }
                        for knob, values in problem.space.values.items()
                    },
                    "sample": [c.as_dict() for c in found.valid[:sample]],
                },
                indent=2,
            )
        )
        return
    display.space_summary(console, problem, found, sample)


@cli.command()
@problem_options
@click.option("--config", "config_text", default="", help="Knobs to set, e.g. zero=2,mbs=4.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Trial folder [default: results/trials/<engine>-<time>].",
)
@click.option("--timeout", default=600.0, show_default=True, help="Wall-clock limit in seconds.")
@click.option(
    "--measured-steps",
    default=None,
    type=click.IntRange(min=2),
    help="Measured steps after warm-up [default: 8].",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable output.")
def trial(
    engine: str,
    model: str,
    cluster: str,
    space: str | None,
    config_text: str,
    out: Path | None,
    timeout: float,
    measured_steps: int | None,
    as_json: bool,
) -> None:
    """Run one config for real and print what was measured."""
    from autotune import trial as trials
    from autotune.launchers import get_launcher
    from autotune.trialspec import StepPlan

    problem = load_problem(engine, model, cluster, space)
    problem.engine.check_runnable(problem.cluster)
    config = problem.config(parse_overrides(config_text))
    steps = StepPlan() if measured_steps is None else StepPlan(measured_steps=measured_steps)
    spec = problem.trial_spec(config, steps)
    folder = out or Path(
        "results", "trials", f"{engine}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    )
    if folder.exists() and any(folder.iterdir()):
        raise InputError(f"trial folder {folder} exists and is not empty")
    if not as_json:
        console.print(f"trial {config.label()} -> {folder}")
    record = trials.run(spec, problem.engine, get_launcher("local"), folder, timeout)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "kind": record.kind,
                    "error": record.error,
                    "folder": str(record.folder),
                    "command": record.command,
                    "result": record.result,
                },
                indent=2,
            )
        )
    else:
        display.trial_record(console, record)
    if record.kind != "ok":
        sys.exit(1)


def slurm_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--partition, --account, --qos and --sbatch-option: where the slurm launcher's jobs go."""
    options = [
        click.option("--partition", default=None, help="slurm: partition of the jobs."),
        click.option("--account", default=None, help="slurm: account charged for the jobs."),
        click.option("--qos", default=None, help="slurm: quality of service of the jobs."),
        click.option(
            "--sbatch-option",
            "sbatch_options",
            multiple=True,
            help="slurm: a further sbatch option for every job, e.g. --sbatch-option=--exclusive.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


storage_option = click.option(
    "--storage",
    default=None,
    help="Optuna storage URL [default: sqlite:///results/<study>/study.db].",
)


def study_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--study, --storage and --results for the commands that read a study."""
    options = [
        click.option("--study", "study_name", required=True, help="Study name."),
        storage_option,
        results_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


@cli.command(name="estimate")
@problem_options
@click.option("--config", "config_text", default="", help="Knobs to set, e.g. tp=8,pp=4.")
@results_option
@click.option(
    "--trial-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Predict the trial a trial.json describes (what a simulated trial re-runs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable output.")
def estimate_command(
    engine: str,
    model: str,
    cluster: str,
    space: str | None,
    config_text: str,
    results: Path,
    trial_file: Path | None,
    as_json: bool,
) -> None:
    """Predict one config: memory and step-time breakdowns, tokens/s, MFU."""
    from autotune.estimate.predict import estimate
    from autotune.estimate.saved import load_calibration

    if trial_file is not None:
        problem, config = problem_from_trial_file(trial_file)
    else:
        problem = load_problem(engine, model, cluster, space)
        config = problem.config(parse_overrides(config_text))
    cal, which = load_calibration(results, problem.cluster)
    e = estimate(problem.workload, config, problem.cluster, problem.engine.name, cal)
    if as_json:
        click.echo(json.dumps({**e.as_dict(), "calibration": which}, indent=2))
        return
    display.estimate(console, problem, e, which)


@cli.command()
@problem_options
@click.option("--top", default=10, show_default=True, help="Configs to show (0: all).")
@results_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable output.")
def plan(
    engine: str,
    model: str,
    cluster: str,
    space: str | None,
    top: int,
    results: Path,
    as_json: bool,
) -> None:
    """Rank every valid config by predicted throughput."""
    from autotune.estimate.saved import load_calibration
    from autotune.study.loop import memory_verdicts

    problem = load_problem(engine, model, cluster, space)
    found = problem.enumerate().require_some()
    cal, which = load_calibration(results, problem.cluster)
    ranked, too_big = memory_verdicts(problem, found.valid, cal)
    shown = ranked if top == 0 else ranked[:top]
    if as_json:
        click.echo(json.dumps([e.as_dict() for e in shown], indent=2))
        return
    display.plan(console, problem, found, ranked, len(too_big), shown, which)


@cli.command()
@click.option("--study", "study_name", default=None, help="Fit to this study's measured trials.")
@storage_option
@click.option(
    "--commbench",
    "commbench_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Fit collective times to an `autotune commbench` report.json instead.",
)
@click.option(
    "--cluster",
    default=None,
    help="With --commbench: the cluster it measured [default: the one the report names].",
)
@results_option
def calibrate(
    study_name: str | None,
    storage: str | None,
    commbench_file: Path | None,
    cluster: str | None,
    results: Path,
) -> None:
    """Fit the model to a study's measured trials, or its collective times to a commbench
    report; later predictions for that cluster use the fit."""
    if (study_name is None) == (commbench_file is None):
        raise InputError("calibrate: give --study NAME or --commbench FILE (one of them)")
    if commbench_file is not None:
        from autotune.estimate.fit_commbench import calibrate_commbench

        display.commbench_calibration(
            console, calibrate_commbench(commbench_file, cluster, results)
        )
        return
    from autotune.estimate.fit_study import calibrate_study
    from autotune.study import load_existing_study
    from autotune.study.storage import study_ref

    assert study_name is not None  # one of the two was given
    ref = study_ref(study_name, storage, results)
    report = calibrate_study(load_existing_study(ref), ref.folder, results)
    display.calibration(console, report)


@cli.command()
@problem_options
@click.option(
    "--launcher",
    default="local",
    show_default=True,
    help="local (torchrun), slurm (sbatch jobs, or srun steps inside an allocation), "
    "simulate (the model's predictions) or replay (a recorded sweep).",
)
@slurm_options
@click.option(
    "--table",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The recorded sweep (CSV) that --launcher replay replays.",
)
@click.option(
    "--trials",
    "n_trials",
    default=8,
    show_default=True,
    type=click.IntRange(min=1),
    help="Trials to run in the study, counting those of earlier runs.",
)
@click.option("--max-time", default=None, help="Start no trial after this long, e.g. 30m, 2h.")
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
    help="guided (the model proposes), tpe, gp, random or grid.",
)
@click.option("--seed", default=None, type=int, help="Seed for reproducible proposals.")
@click.option(
    "--early-stop/--no-early-stop",
    default=True,
    show_default=True,
    help="Stop trials clearly slower than the best so far (sign test on steps).",
)
@click.option(
    "--confirm/--no-confirm",
    default=True,
    show_default=True,
    help="Re-measure leaders within noise with longer trials before naming one.",
)
@click.option(
    "--early-stop-margin",
    default=0.10,
    show_default=True,
    type=click.FloatRange(0),
    help="How much slower than the best a trial must be, as a fraction.",
)
@click.option(
    "--measured-steps",
    default=None,
    type=click.IntRange(min=2),
    help="Measured steps per trial after warm-up [default: 8].",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(
    engine: str,
    model: str,
    cluster: str,
    space: str | None,
    launcher: str,
    partition: str | None,
    account: str | None,
    qos: str | None,
    sbatch_options: tuple[str, ...],
    table: Path | None,
    n_trials: int,
    max_time: str | None,
    timeout_per_trial: str,
    study_name: str | None,
    storage: str | None,
    results: Path,
    sampler: str,
    seed: int | None,
    early_stop: bool,
    early_stop_margin: float,
    confirm: bool,
    measured_steps: int | None,
    command: tuple[str, ...],
) -> None:
    """Tune: search the space with real trials, then export the best config.

    After `--`, your own training command: a DeepSpeed or Hugging Face script (`-- train.py
    --deepspeed_config ds.json ...`), each trial with a ds_config made from yours; with
    --engine megatron, a Megatron-LM script (`-- pretrain_gpt.py ...`), its parallel, batch,
    recompute and overlap flags replaced; with --engine torch, torchtitan (`-- -m
    torchtitan.train ...`, the model given by --model) or, with --space, any loop that
    calls autotune.step.done().
    """
    from autotune.estimate.saved import load_calibration
    from autotune.export import export_best
    from autotune.launchers import LaunchSettings, get_launcher
    from autotune.study import Budget, open_study, run_study
    from autotune.study.samplers import make_sampler
    from autotune.study.storage import default_study_name, study_ref
    from autotune.trialspec import StepPlan

    problem = load_problem(engine, model, cluster, space, command)
    problem.enumerate().require_some()
    if problem.job is not None and launcher in ("replay", "simulate"):
        raise InputError(
            f"--launcher {launcher} does not run anything: your own command needs local or slurm"
        )
    per_trial_s = parse_duration(timeout_per_trial, "--timeout-per-trial")
    assert per_trial_s is not None  # the option has a default
    budget = Budget(
        trials=n_trials,
        max_time_s=parse_duration(max_time, "--max-time"),
        timeout_per_trial_s=per_trial_s,
        early_stop_margin=early_stop_margin if early_stop else None,
        confirm=confirm,
    )
    cal, _ = load_calibration(results, problem.cluster)
    settings = LaunchSettings(
        calibration=cal,
        slurm=_slurm_settings(problem.cluster, partition, account, qos, sbatch_options),
        gpus=problem.cluster.backend == "nccl",
        table=table,
    )
    chosen_launcher = get_launcher(launcher, settings)
    problem = chosen_launcher.narrow(problem)
    if chosen_launcher.source == "measured":
        problem.engine.check_runnable(problem.cluster)
        chosen_launcher.check(problem.cluster)

    ref = study_ref(study_name or default_study_name(problem), storage, results)
    study = open_study(ref, problem, make_sampler(sampler, seed))
    steps = StepPlan() if measured_steps is None else StepPlan(measured_steps=measured_steps)
    console.print(
        f"study [bold]{ref.name}[/] ({ref.storage_url}): {problem.engine.name} on "
        f"{problem.workload.name} / {problem.cluster.name}"
    )
    outcome = run_study(
        problem,
        ref,
        study,
        chosen_launcher,
        budget,
        steps,
        display.RichProgress(console),
        seed,
        cal,
        sampler,
    )
    if outcome.resumed_failed:
        console.print(
            f"resumed: trial(s) {outcome.resumed_failed} of a run that died are "
            "recorded as failed (interrupted)"
        )
    console.print(f"stopped: {outcome.stop_reason}")
    from autotune.report.table import best_trial

    exported = []  # none without a completed trial; any other failure to export is raised
    if best_trial(study) is not None:
        exported = export_best(study, ref.folder / "best", force=True)
    display.study_summary(console, study, ref, exported)
    if outcome.ran or outcome.confirmations:
        from autotune.report.html import write_report

        console.print(f"report: {write_report(study, ref.folder / 'report.html')}")
    if problem.job is not None and not exported:
        sys.exit(1)  # no config of the user's command could be measured: their job failed


def _slurm_settings(
    cluster: Cluster,
    partition: str | None,
    account: str | None,
    qos: str | None,
    sbatch_options: tuple[str, ...],
) -> SlurmSettings:
    """The cluster file's `slurm:` section, overridden by the flags given."""
    flags = {"partition": partition, "account": account, "qos": qos}
    chosen: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    if sbatch_options:
        chosen["extra_sbatch"] = cluster.slurm.extra_sbatch + tuple(sbatch_options)
    return dataclasses.replace(cluster.slurm, **chosen)


@cli.command(name="trials")
@study_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
)
def trials_command(study_name: str, storage: str | None, results: Path, fmt: str) -> None:
    """Every trial of a study, best first."""
    from autotune.report import trial_table
    from autotune.study import load_existing_study
    from autotune.study.storage import study_ref

    study = load_existing_study(study_ref(study_name, storage, results))
    frame = trial_table(study)
    if fmt == "csv":
        click.echo(frame.to_csv(index=False), nl=False)
    elif fmt == "json":
        click.echo(frame.to_json(orient="records", indent=2))
    else:
        display.trial_table(console, frame)


@cli.command()
@study_options
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Output folder [default: results/<study>/best].",
)
@click.option("--force", is_flag=True, help="Replace a non-empty output folder.")
def export(
    study_name: str, storage: str | None, results: Path, out: Path | None, force: bool
) -> None:
    """Write the best config's launch files."""
    from autotune.export import export_best
    from autotune.study import load_existing_study
    from autotune.study.storage import study_ref

    ref = study_ref(study_name, storage, results)
    study = load_existing_study(ref)
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
def report(study_name: str, storage: str | None, results: Path, out: Path | None) -> None:
    """Write the study's self-contained HTML report."""
    from autotune.report.html import write_report
    from autotune.study import load_existing_study
    from autotune.study.storage import study_ref

    ref = study_ref(study_name, storage, results)
    console.print(str(write_report(load_existing_study(ref), out or ref.folder / "report.html")))


@cli.command()
@study_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--expose",
    is_flag=True,
    help="Allow a --host beyond loopback (optuna-dashboard has no authentication).",
)
def dashboard(
    study_name: str, storage: str | None, results: Path, host: str, port: int, expose: bool
) -> None:
    """Serve optuna-dashboard on the study's storage until Ctrl-C."""
    import optuna_dashboard

    from autotune.report.dashboard import check_host
    from autotune.study import load_existing_study
    from autotune.study.storage import study_ref

    check_host(host, expose)
    ref = study_ref(study_name, storage, results)
    study = load_existing_study(ref)
    study_id = study._study_id
    console.print(f"dashboard: http://{host}:{port}/dashboard/studies/{study_id}  (Ctrl-C stops)")
    optuna_dashboard.run_server(study._storage, host=host, port=port)


@cli.command()
@click.option(
    "--cluster",
    default="local",
    show_default=True,
    help="local or local:N (this host: gloo processes or GPUs with NCCL), a preset or a "
    "cluster file; several nodes need --launcher slurm.",
)
@click.option("--ops", default=",".join(COLLECTIVES), show_default=True, help="Collectives.")
@click.option("--sizes", default="1K:256M", show_default=True, help="Message sizes MIN:MAX.")
@click.option(
    "--groups",
    default="intra",
    show_default=True,
    help="Group shapes: intra (a node's ranks), intra:K (K adjacent ranks, like TP of K), "
    "inter (one rank per node, like DP).",
)
@click.option(
    "--sweep/--no-sweep",
    default=True,
    show_default=True,
    help="On NCCL, also time every NCCL_ALGO x NCCL_PROTO each collective offers.",
)
@click.option(
    "--launcher",
    type=click.Choice(["local", "slurm"]),
    default="local",
    show_default=True,
    help="local (torchrun on this host) or slurm (a job, or a step of this allocation).",
)
@slurm_options
@results_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def commbench(
    cluster: str,
    ops: str,
    sizes: str,
    groups: str,
    sweep: bool,
    launcher: str,
    partition: str | None,
    account: str | None,
    qos: str | None,
    sbatch_options: tuple[str, ...],
    results: Path,
    as_json: bool,
) -> None:
    """Time collectives over powers-of-two message sizes, with nccl-tests' algbw and busbw,
    beside a memory copy measured in the same run."""
    from autotune.commbench import parse_groups, parse_ops, parse_sizes, run_commbench
    from autotune.launchers import LaunchSettings, get_launcher
    from autotune.specs import load_cluster

    spec = load_cluster(cluster)
    chosen_ops, chosen_sizes = parse_ops(ops), parse_sizes(sizes)
    shapes = tuple(parse_groups(groups, spec))
    slurm = _slurm_settings(spec, partition, account, qos, sbatch_options)
    runner = get_launcher(launcher, LaunchSettings(slurm=slurm, gpus=spec.backend == "nccl"))
    out = results / "commbench"
    report = run_commbench(spec, chosen_ops, chosen_sizes, out, shapes, sweep, runner)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    display.commbench(console, report)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | None, flag: str) -> float | None:
    """`90`, `90s`, `30m`, `1h30m` -> seconds; must be positive."""
    if text is None:
        return None
    cleaned = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        seconds = float(cleaned)
    elif re.fullmatch(f"(?:{_DURATION.pattern})+", cleaned):
        seconds = sum(float(n) * _SECONDS[u] for n, u in _DURATION.findall(cleaned))
    else:
        raise InputError(f"{flag}: expected a duration like 90s, 30m or 1h30m, not {text!r}")
    if seconds <= 0:
        raise InputError(f"{flag}: the duration must be positive, not {text!r}")
    return seconds


def _interrupt_on_sigterm() -> None:
    """SIGTERM stops the tuner like Ctrl-C: the running trial is stopped and recorded."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main() -> None:
    _interrupt_on_sigterm()
    _quiet_optuna()
    try:
        cli.main(standalone_mode=False)
    except AutotuneError as exc:  # input errors exit 2, what failed at run time 1
        click.echo(f"autotune: error: {exc}", err=True)
        sys.exit(2 if isinstance(exc, InputError) else 1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"autotune: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("autotune: interrupted", err=True)
        sys.exit(130)
