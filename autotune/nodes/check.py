"""The node check, run: which nodes a study's trials may land on, the check launched on all of
them like a trial (`worker.py`), its verdict (`judge.py`), and what a study does with it:
slow nodes kept out of its trials, or the study refused in one line when too few are left."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from autotune.errors import InputError, LaunchError
from autotune.launchers.base import LOG_FILE, Launcher, LaunchRequest
from autotune.launchers.slurm import SlurmLauncher, in_allocation
from autotune.launchers.slurm_accounting import slurm_call
from autotune.nodes.judge import LinkReading, NodeCheck, judge, per_node
from autotune.specs.cluster import Cluster

PLAN_FILE = "node_check.json"
REPORT_FILE = "node_readings.json"
TIME_LIMIT_S = 300.0
UP_STATES = ("idle", "mix", "mixed", "alloc", "allocated", "comp", "completing")
"""sinfo's states of a node a job can be given (without its flags: `*` not responding,
`~` powered off, `#` powering up, `!` powering down, ...)."""
SIZES = {"nccl": (8192, 1 << 30, 256 << 20), "gloo": (512, 64 << 20, 16 << 20)}
"""Per backend: the matrix side, the copy's bytes and the link check's bytes: a second or
less of each on an H100, and on a CPU."""


def candidate_nodes(launcher: SlurmLauncher) -> tuple[str, ...]:
    """The nodes trials may land on: the tuner's allocation's, or those of the partition
    that are up."""
    if in_allocation():
        listed = os.environ.get("SLURM_JOB_NODELIST", "")
        names = slurm_call("scontrol", "show", "hostnames", listed).stdout.split()
        return tuple(names)
    partition = ["--partition", launcher.settings.partition] if launcher.settings.partition else []
    shown = slurm_call("sinfo", "--noheader", "--Node", "--format=%N %t", *partition).stdout
    up = set()
    for line in shown.splitlines():
        name, _, state = line.strip().partition(" ")
        if state.rstrip("*~#!%$@^-+") in UP_STATES:
            up.add(name)
    return tuple(sorted(up - set(launcher.settings.exclude)))


def run_check(
    cluster: Cluster, launcher: SlurmLauncher, nodes: tuple[str, ...], folder: Path
) -> NodeCheck:
    """The check on every node of `nodes`, each with the cluster's devices per node."""
    folder = (folder / datetime.now().strftime("%Y%m%d-%H%M%S")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    matmul, copy, link = SIZES["nccl" if cluster.backend == "nccl" else "gloo"]
    plan = {
        "backend": cluster.backend,
        "devices_per_node": cluster.devices_per_node,
        "matmul_size": matmul,
        "copy_bytes": copy,
        "link_bytes": link,
        "out": str(folder / REPORT_FILE),
    }
    (folder / PLAN_FILE).write_text(json.dumps(plan, indent=2) + "\n")
    pinned = replace(
        launcher.settings,
        extra_sbatch=(*launcher.settings.extra_sbatch, f"--nodelist={','.join(nodes)}"),
    )
    outcome = SlurmLauncher(pinned, gpus=launcher.gpus).run(
        LaunchRequest(
            folder=folder,
            worker_module="autotune.nodes.worker",
            worker_file=PLAN_FILE,
            nprocs_per_node=cluster.devices_per_node,
            nnodes=len(nodes),
            time_limit_s=TIME_LIMIT_S,
        )
    )
    if not (folder / REPORT_FILE).exists():
        why = outcome.error or f"exit {outcome.returncode}"
        raise LaunchError(f"the node check failed ({why}); see {folder / LOG_FILE}")
    report = json.loads((folder / REPORT_FILE).read_text())
    links = [LinkReading((r["nodes"][0], r["nodes"][1]), r["gbps"]) for r in report["links"]]
    check = judge(per_node(report["ranks"]), links)
    (folder / "verdict.json").write_text(json.dumps(check.as_dict(), indent=2) + "\n")
    return check


def confirmed_check(
    cluster: Cluster, launcher: SlurmLauncher, nodes: tuple[str, ...], folder: Path
) -> NodeCheck:
    """The check, and where it names a slow node, the check again: a node is slow only when
    both say so (a node's neighbours, on a shared host, can make one short reading low)."""
    first = run_check(cluster, launcher, nodes, folder)
    if not first.slow:
        return first
    second = run_check(cluster, launcher, nodes, folder)
    both = {node: why for node, why in second.slow.items() if node in first.slow}
    return replace(second, slow=both)


def nodes_needed(cluster: Cluster, trial_nodes: int | None, full_size: bool) -> int:
    """The most nodes any trial of the study runs on: its slice, or the whole cluster where
    it measures at full size."""
    if trial_nodes is None or full_size:
        return cluster.nodes
    return trial_nodes


def preflight(
    cluster: Cluster,
    launcher: SlurmLauncher,
    needed: int,
    folder: Path,
    say: Callable[[str], None],
) -> NodeCheck | None:
    """Check the nodes before a study on SLURM and keep the slow ones out of its trials;
    None where there is one node or none to compare."""
    nodes = candidate_nodes(launcher)
    if len(nodes) < 2:
        return None
    say(f"checking {len(nodes)} nodes (compute, memory, links) before trusting them")
    check = confirmed_check(cluster, launcher, nodes, folder)
    if check.slow and len(check.healthy) < needed:
        named = "; ".join(f"{node}: {why}" for node, why in check.slow.items())
        raise InputError(
            f"slow node(s) {named}; the study's trials need {needed} nodes and "
            f"{len(check.healthy)} healthy are left: fix or drain them, or run with "
            "--no-node-check to measure on them anyway"
        )
    launcher.keep_off(tuple(check.slow))
    say(check.line())
    return check


def keep_out(launcher: Launcher, slow: tuple[str, ...], needed: int, why: str) -> str | None:
    """Keep nodes a trial found slow (`why`) out of later trials; why the study must stop
    where it cannot: the launcher does not choose its nodes, or too few are left."""
    if not isinstance(launcher, SlurmLauncher):
        return f"{why}; the {launcher.name} launcher cannot keep a node out of trials"
    launcher.keep_off(slow)
    left = set(candidate_nodes(launcher)) - set(launcher.settings.exclude)
    if len(left) < needed:
        return (
            f"{why}; with it kept out {len(left)} node(s) are left where the study's trials "
            f"need {needed}: fix or drain it"
        )
    return None
