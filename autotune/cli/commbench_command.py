"""`autotune commbench`: collectives timed on the cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from autotune.cli import commbench_display
from autotune.cli.app import cli
from autotune.cli.help import completing, lowered
from autotune.cli.options import (
    console,
    launcher_flags,
    launcher_options,
    measuring_launcher_names,
    results_option,
)
from autotune.commbench.bench import OPS as COLLECTIVES
from autotune.errors import InputError


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
    default="local",
    show_default=True,
    callback=lowered,
    shell_complete=completing(measuring_launcher_names),
    help="A launcher that measures: local (torchrun on this host) or slurm (a job, or a step "
    "of this allocation).",
)
@launcher_options(measuring_launcher_names)
@results_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def commbench(
    cluster: str,
    ops: str,
    sizes: str,
    groups: str,
    sweep: bool,
    launcher: str,
    results: Path,
    as_json: bool,
    **flags: Any,
) -> None:
    """Time collectives over powers-of-two message sizes, with nccl-tests' algbw and busbw,
    beside a memory copy measured in the same run."""
    from autotune.commbench.bench import parse_groups, parse_ops, parse_sizes, run_commbench
    from autotune.launchers import LAUNCHERS, LaunchSettings, check_settings, get_launcher
    from autotune.specs import load_cluster

    if launcher not in (measuring := measuring_launcher_names()):
        if launcher not in LAUNCHERS:
            get_launcher(launcher)  # refused there, with the closest name known
        raise InputError(
            f"commbench times collectives on real processes; launcher {launcher!r} does not "
            f"run them (launchers that do: {', '.join(measuring)})"
        )
    spec = load_cluster(cluster)
    chosen_ops, chosen_sizes = parse_ops(ops), parse_sizes(sizes)
    shapes = tuple(parse_groups(groups, spec))
    settings = LaunchSettings(
        gpus=spec.backend == "nccl", cluster=spec, flags=launcher_flags(flags, measuring)
    )
    check_settings(settings)  # the cluster file's launcher sections, and the flags
    runner = get_launcher(launcher, settings)
    out = results / "commbench"
    report = run_commbench(spec, chosen_ops, chosen_sizes, out, shapes, sweep, runner)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    commbench_display.commbench(console, report)
