"""Commands that look before running: the space, estimates, plans, calibration, one trial."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import click

from autotune.cli import commbench_display, display
from autotune.cli.app import cli
from autotune.cli.options import (
    check_writable_folder,
    checked_problem,
    console,
    length_options,
    problem_options,
    results_option,
    step_plan,
    storage_option,
)
from autotune.errors import InputError
from autotune.problem import load_problem, problem_from_trial_file
from autotune.space import parse_overrides
from autotune.units import display_label


@cli.command()
@problem_options
@click.option("--sample", default=5, show_default=True, help="Valid configs to show.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable output.")
def space(
    engine: str, model: str, cluster: str, space: str | None, sample: int, as_json: bool
) -> None:
    """Count and explain the valid configs of a search space."""
    problem = checked_problem(load_problem(engine, model, cluster, space))
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
@length_options
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
    precision: float,
    as_json: bool,
) -> None:
    """Run one config for real and print what was measured."""
    from autotune import runner as trials
    from autotune.launchers import get_launcher

    problem = checked_problem(load_problem(engine, model, cluster, space))
    problem.engine.check_runnable(problem.cluster)
    config = problem.config(parse_overrides(config_text))
    spec = problem.trial_spec(config, step_plan(measured_steps, precision))
    folder = out or Path(
        "results", "trials", f"{engine}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    )
    check_writable_folder(folder, "--out")
    if folder.exists() and any(folder.iterdir()):
        raise InputError(f"trial folder {folder} exists and is not empty")
    if not as_json:
        console.print(f"trial {display_label(config)} -> {folder}")
    with get_launcher("local") as launcher:
        record = trials.run(spec, problem.engine, launcher, folder, timeout)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "kind": record.kind,
                    "error": record.error,
                    "folder": str(record.folder),
                    "command": record.command,
                    "result": record.result.as_dict() if record.result else None,
                },
                indent=2,
            )
        )
    else:
        display.trial_record(console, record)
    if record.kind != "ok":
        sys.exit(1)


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
    from autotune.calibration.saved import load_calibration
    from autotune.estimate.predict import estimate

    if trial_file is not None:
        problem, config = problem_from_trial_file(trial_file)
    else:
        problem = checked_problem(load_problem(engine, model, cluster, space))
        config = problem.config(parse_overrides(config_text))
    cal, which = load_calibration(results, problem.cluster, problem.engine.name)
    e = estimate(problem.workload, config, problem.cluster, problem.engine.traits, cal)
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
    from autotune.calibration.saved import load_calibration
    from autotune.estimate.ranking import memory_verdicts

    problem = checked_problem(load_problem(engine, model, cluster, space))
    found = problem.enumerate().require_some()
    cal, which = load_calibration(results, problem.cluster, problem.engine.name)
    ranked = memory_verdicts(
        problem.workload, problem.cluster, problem.engine.traits, found.valid, cal
    )
    shown = ranked[:] if top == 0 else ranked[:top]
    if as_json:
        click.echo(json.dumps([e.as_dict() for e in shown], indent=2))
        return
    folding = ranked[:] if top == 0 else ranked[: top * FOLD_ROOM]  # NCCL variants fold
    display.plan(console, problem, found, ranked, ranked.too_big, folding, which, top)


FOLD_ROOM = 32
"""Estimates read per row `plan` shows: the rows folding NCCL variants of one layout."""


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
        from autotune.calibration.from_commbench import calibrate_commbench

        commbench_display.commbench_calibration(
            console, calibrate_commbench(commbench_file, cluster, results)
        )
        return
    from autotune.calibration.from_study import calibrate_study
    from autotune.study import load_existing_study
    from autotune.study.record.storage import study_ref

    assert study_name is not None  # one of the two was given
    ref = study_ref(study_name, storage, results)
    report = calibrate_study(load_existing_study(ref), ref.folder, results)
    display.calibration(console, report)
