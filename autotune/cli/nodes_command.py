"""`autotune nodes`: the node check alone, on every node SLURM may give a study's trials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from autotune.cli.app import cli
from autotune.cli.options import (
    checked_cluster,
    console,
    launcher_flags,
    launcher_options,
    results_option,
)
from autotune.errors import InputError


@cli.command()
@click.option(
    "--cluster",
    default="local:1",
    show_default=True,
    help="A preset or cluster file: its devices per node and backend (each node's GPUs with "
    "NCCL, or gloo processes).",
)
@launcher_options(lambda: ["slurm"])
@results_option
@click.option("--json", "as_json", is_flag=True, help="Print the readings and verdict as JSON.")
def nodes(cluster: str, results: Path, as_json: bool, **flags: Any) -> None:
    """Time compute, memory bandwidth and links on every node a study's trials may land on
    (the allocation's, or the partition's nodes that are up) and name any node well outside
    its peers; `autotune run --launcher slurm` does the same before a study."""
    from autotune.launchers import LaunchSettings
    from autotune.launchers.slurm import SlurmLauncher
    from autotune.nodes.check import candidate_nodes, confirmed_check
    from autotune.specs import load_cluster

    spec = checked_cluster(load_cluster(cluster))
    launcher = SlurmLauncher.build(
        LaunchSettings(
            gpus=spec.backend == "nccl", cluster=spec, flags=launcher_flags(flags, ["slurm"])
        )
    )
    found = candidate_nodes(launcher)
    if not found:
        raise InputError("SLURM lists no node that is up in this partition")
    check = confirmed_check(spec, launcher, found, results / "nodes")
    if as_json:
        click.echo(json.dumps(check.as_dict(), indent=2))
        return
    table = Table(title=f"node check: {len(check.nodes)} nodes, each by its slowest device")
    for header in ("node", "compute TFLOP/s", "memory GB/s", "verdict"):
        table.add_column(header, justify="left" if header in ("node", "verdict") else "right")
    for reading in check.nodes:
        verdict = check.slow.get(reading.node, "ok")
        table.add_row(
            reading.node, f"{reading.compute_tflops:.3g}", f"{reading.memory_gbps:.3g}", verdict
        )
    console.print(table)
    for link in check.links:
        console.print(f"link {link.nodes[0]}-{link.nodes[1]}: {link.gbps:.3g} GB/s")
    console.print(check.line())
