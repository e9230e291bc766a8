"""One trial run: a folder with everything needed to re-run it (the engine's or the user's
framework's files, the command, launch.sh), the launch, and its outcome."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path

import yaml

from autotune import shell
from autotune.engines import get_framework
from autotune.engines.base import Engine
from autotune.engines.framework import write_command
from autotune.launchers import Launcher, LaunchOutcome, LaunchRequest
from autotune.launchers.base import LOG_FILE
from autotune.launchers.log_limit import bound
from autotune.launchers.process_tree import sweep
from autotune.nodes.judge import slow_in_trial
from autotune.trial.result import TrialResult
from autotune.trial.spec import (
    TRIAL_ENV,
    TRIAL_FILE,
    PoolKind,
    TrialSpec,
    nccl_environment,
    write_atomically,
)

OUTCOME_FILE = "outcome.json"
LAUNCH_SCRIPT = "launch.sh"


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """What the tuner keeps of a finished trial."""

    kind: str
    error: str | None
    folder: Path
    command: str
    wall_s: float
    result: TrialResult | None = None
    queue_s: float = 0.0
    swept: tuple[str, ...] = ()
    """Processes the trial left running on this host, stopped once it ended."""
    slow_nodes: tuple[str, ...] = ()
    """Nodes the trial found slow (`slow_node`), for the study to keep out of later trials."""


def slow_nodes(spec: TrialSpec, result: TrialResult | None) -> dict[str, str]:
    """The nodes a trial that spans nodes found slow, each with why; {} where its nodes do
    unlike work (pipeline stages split over them) or it was not profiled."""
    if result is None or spec.config.pp > 1:
        return {}
    return slow_in_trial(result.node_compute_s, result.step_time_s)


def slow_node_error(slow: dict[str, str]) -> str:
    named = "; ".join(f"{node} ({why})" for node, why in slow.items())
    return f"slow node {named}: the trial's speed is the node's, not the config's"


def prepare(
    spec: TrialSpec, engine: Engine, launcher: Launcher, folder: Path, time_limit_s: float
) -> LaunchRequest:
    """Write config.yaml, trial.json, the engine's files (or, for the user's command, its
    framework's files and command.json) and launch.sh into the trial folder (which `run`
    makes new first: see `set_aside`)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_config_yaml(spec, folder)
    (folder / TRIAL_FILE).write_text(spec.to_json())
    module, pool = _write_work(spec, engine, folder)
    job_env = get_framework(spec.job.framework).trial_environment() if spec.job else {}
    request = LaunchRequest(
        folder=folder,
        worker_module=module,
        nprocs_per_node=spec.cluster.devices_per_node,
        nnodes=spec.cluster.nodes,
        env={
            **engine.environment(spec.cluster),
            **job_env,
            **nccl_environment(spec),
            TRIAL_ENV: str(folder.resolve()),
        },
        time_limit_s=time_limit_s,
        pool=pool,
    )
    script = folder / LAUNCH_SCRIPT
    script.write_text(launch_script(launcher, request))
    script.chmod(0o755)
    return request


def write_config_yaml(spec: TrialSpec, folder: Path, ran_on: str | None = None) -> None:
    """config.yaml: what the trial runs, on how many nodes (a slice's, in a slice study)
    and, once it ran, which (`ran_on`)."""
    (folder / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "engine": spec.engine,
                "workload": spec.workload.name,
                "cluster": spec.cluster.name,
                "nodes": spec.cluster.nodes,
                **({"ran_on": ran_on} if ran_on else {}),
                "config": spec.config.as_dict(),
                **({"command": list(spec.job.command)} if spec.job else {}),
            },
            sort_keys=False,
        )
    )


def named_nodes(
    spec: TrialSpec, folder: Path, result: TrialResult | None, ran_on: str | None
) -> TrialResult | None:
    """The trial's config.yaml and result.json naming the nodes it ran on and their count
    (none named for a trial that ran nowhere: a simulated one); the result so named."""
    if ran_on is None:
        return result
    write_config_yaml(spec, folder, ran_on)
    if result is None:
        return None
    named = replace(result, nodes=spec.cluster.nodes, ran_on=ran_on)
    named.write(folder)
    return named


def _write_work(spec: TrialSpec, engine: Engine, folder: Path) -> tuple[str, PoolKind | None]:
    """The files the trial's ranks read, and the module they run and the pool it may run
    in: autotune's own worker of the engine, or the rank module of the user's framework
    (forked from a pool rank only on gloo: a fork is safe only before a device context
    exists)."""
    if spec.job is None:
        engine.write_files(spec, folder)
        return engine.worker_module, engine.pool_for(spec)
    framework = get_framework(spec.job.framework)
    files = framework.write_trial_files(spec, folder)
    config_path = str(files[0].resolve()) if files else ""
    write_command(spec, framework, folder, config_path)
    forked = framework.forked and spec.cluster.backend == "gloo"
    return framework.rank_module, "forked" if forked else None


def launch_script(launcher: Launcher, request: LaunchRequest) -> str:
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            "# Re-runs this trial by hand: same environment, same command, same files.",
            "set -euo pipefail",
            'cd "$(dirname "$0")"',
            shell.exports(request.env),
            shell.join(launcher.command(request)),
            "",
        ]
    )


def set_aside(folder: Path) -> Path | None:
    """Move a non-empty `folder` a previous launch left (a study started over after its
    study.db was deleted, or one on another --storage) aside to `<name>.stale-<timestamp>`
    beside it, so that nothing it held (result.json, error-rank*.json, outcome.json, logs,
    metrics) can be read as the new trial's; its files are kept, not deleted. An empty folder
    stays. Returns where it went, or None."""
    if not folder.is_dir() or not any(folder.iterdir()):
        return None
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    aside = folder.with_name(f"{folder.name}.stale-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = folder.with_name(f"{folder.name}.stale-{stamp}-{n}")
    folder.rename(aside)
    return aside


def run(
    spec: TrialSpec,
    engine: Engine,
    launcher: Launcher,
    folder: Path,
    time_limit_s: float,
) -> TrialRecord:
    """Launch the trial in a new folder: what a previous launch left there is set aside."""
    set_aside(folder)
    request = prepare(spec, engine, launcher, folder, time_limit_s)
    try:
        outcome: LaunchOutcome = launcher.run(request)
    finally:  # what the trial left running here, however it ended; its log kept bounded
        swept = sweep(request.env[TRIAL_ENV])
        bound(folder / LOG_FILE)
    result = named_nodes(spec, folder, outcome.result, launcher.ran_on(request))
    slow = slow_nodes(spec, result) if outcome.kind == "ok" else {}
    record = TrialRecord(
        kind="slow_node" if slow else outcome.kind,
        error=slow_node_error(slow) if slow else outcome.error,
        folder=folder,
        command=shell.join(launcher.command(request)),
        wall_s=outcome.wall_s,
        result=result,
        queue_s=outcome.queue_s,
        swept=swept,
        slow_nodes=tuple(slow),
    )
    write_outcome(record)
    return record


def moved(
    record: TrialRecord, folder: Path, engine: Engine, launcher: Launcher, time_limit_s: float
) -> TrialRecord:
    """A finished trial's record once its folder is moved to `folder` (a stale one there is
    set aside, as for a new trial), its files written again for where it now lies (a SLURM
    launch.sh names its folder)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    set_aside(folder)
    if folder.is_dir():
        folder.rmdir()  # empty
    record.folder.rename(folder)
    folder.chmod(0o755)  # made by mkdtemp, 0700
    spec = TrialSpec.from_json((folder / TRIAL_FILE).read_text())
    request = prepare(spec, engine, launcher, folder, time_limit_s)
    named_nodes(spec, folder, None, record.result.ran_on if record.result else None)
    record = replace(record, folder=folder, command=shell.join(launcher.command(request)))
    write_outcome(record)
    return record


def write_outcome(record: TrialRecord) -> None:
    """outcome.json: what the tuner kept of the trial, beside the trial's own files."""
    write_atomically(
        record.folder / OUTCOME_FILE,
        json.dumps({**asdict(record), "folder": str(record.folder)}, indent=2) + "\n",
    )
