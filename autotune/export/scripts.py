"""The texts of best/'s launch files: train.sh (torchrun with autotune's worker or the
user's own command) and nccl.env; each says where its figures come from, and a simulated
export says so first. A launcher's own files (SLURM's train.sbatch) are its own
(`Launcher.export_files`)."""

from __future__ import annotations

import math
from typing import Any

import optuna

from autotune import shell
from autotune.engines import get_framework
from autotune.engines.base import Engine
from autotune.launchers import torchrun
from autotune.study.record.trial_attrs import TrialAttrs
from autotune.trial.spec import TRIAL_FILE, TrialSpec

NVIDIA_CAUTION = (
    "NVIDIA documents NCCL_ALGO and NCCL_PROTO as debugging variables that "
    "production code should generally not set; keep them only while they win."
)


def simulated_banner(trial: optuna.trial.FrozenTrial) -> list[str]:
    """The first comment lines of an export whose figures were predicted, not measured."""
    if TrialAttrs.of(trial).source != "simulated":
        return []
    return [
        "# SIMULATED: this config and its figures come from autotune's model, not from a "
        "measured trial. Measure it on the real cluster before relying on it."
    ]


def nccl_env_text(
    env: dict[str, str],
    spec: TrialSpec,
    trial: optuna.trial.FrozenTrial,
    note: str | None = None,
    chosen: int | None = None,
) -> str:
    """nccl.env for the config of `trial`, named by the trial that chose it (`chosen`)."""
    lines = [
        *simulated_banner(trial),
        shell.comment(
            f"NCCL settings of study trial {trial.number if chosen is None else chosen} "
            f"({spec.cluster.name}, "
            f"{spec.cluster.backend} backend)."
        ),
    ]
    if spec.cluster.backend != "nccl":
        lines.append("# The gloo backend was tuned: NCCL settings do not apply; none are set.")
    elif not env:
        lines.append("# NCCL's own choices won: nothing is set.")
    else:
        lines.append(f"# {NVIDIA_CAUTION}")
    if note:
        lines.append(shell.comment(note))
    lines += [f"{name}={shell.quote(value)}" for name, value in env.items()]
    return "\n".join(lines) + "\n"


RENDEZVOUS = torchrun.Rendezvous(
    endpoint='"${RDZV_ENDPOINT:?set RDZV_ENDPOINT to host:port}"',
    node_rank='"${NODE_RANK:?set NODE_RANK}"',
)
"""train.sh on one node of several: where they meet and which node this is, set by a
launcher's exported job (SLURM's train.sbatch) or by hand."""


def train_script(
    engine: Engine,
    spec: TrialSpec,
    trial: optuna.trial.FrozenTrial,
    study_name: str,
    job_config: str = "",
    standing: dict[str, Any] | None = None,
    name: str | None = None,
) -> str:
    """torchrun for the best config (`name`: as the verdict names it) with autotune's worker,
    or the user's own command with `job_config` where it was tuned; one node or, with NNODES
    > 1, a c10d rendezvous at $RDZV_ENDPOINT with this node's $NODE_RANK."""
    cluster, attrs = spec.cluster, TrialAttrs.of(trial)
    measured = _figure_words(attrs, standing)
    launcher = " ".join(
        [
            'exec "${TORCHRUN:-torchrun}"',
            *torchrun.options(
                cluster.nodes, cluster.devices_per_node, None if cluster.nodes == 1 else RENDEZVOUS
            ),
        ]
    )
    where = f"on {cluster.nodes} node(s) x {cluster.devices_per_node} device(s)"
    if spec.job is not None:
        what = f"# Runs your own command with it {where}, from the folder it was tuned in."
        launch = [
            'here="$(pwd)"',
            *(
                f'export {name}="{value}"'
                for name, value in get_framework(spec.job.framework)
                .export_environment(job_config)
                .items()
            ),
            f"cd {shell.quote(spec.user_job.workdir)}",
            f"{launcher} {job_command(spec, job_config)}",
        ]
    else:
        what = (
            f"# Runs it with autotune's worker {where}. For your own training script: "
            f"{engine.script_hint(spec)}."
        )
        worker = shell.join(torchrun.rank_words(engine.worker_module))
        launch = [f"{launcher} {worker} {TRIAL_FILE}"]
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            *simulated_banner(trial),
            shell.comment(
                f"autotune: best config of study {study_name!r}, "
                f"{name or f'trial {trial.number}'} ({attrs.source or 'measured'}: {measured})."
            ),
            what,
            "set -euo pipefail",
            'cd "$(dirname "$0")"',
            "set -a; source ./nccl.env; set +a",
            *filter(None, [shell.exports(engine.environment(cluster))]),
            *launch,
            "",
        ]
    )


def _figure_words(attrs: TrialAttrs, standing: dict[str, Any] | None) -> str:
    """The throughput train.sh's header states: the standing's, with its interval and
    where it comes from, else the trial's own."""
    tps = standing["tokens_per_s"] if standing else attrs.tokens_per_s
    words = f"{tps:,.0f} tokens/s" if tps else "?"
    if tps and standing and standing.get("interval_95"):
        n = standing["measurements"]
        basis = standing.get("figures_from") or f"the mean of {n} trial{'s' if n > 1 else ''}"
        half = math.log1p(standing["interval_95"])
        low, high = tps * math.exp(-half), tps * math.exp(half)
        words += f" (95% range {low:,.0f}-{high:,.0f}; {basis})"
    return words


def job_command(spec: TrialSpec, config_file: str) -> str:
    """The user's command for the best config, for a shell, its config argument naming
    `config_file` in this folder ($here) while the command runs from the user's folder."""
    argv = get_framework(spec.user_job.framework).export_argv(spec, config_file)
    words = [shell.quote(arg) for arg in argv]
    index = spec.user_job.config_index
    if index is None:  # flags rewritten, or the script reads $AUTOTUNE_CONFIG
        return " ".join(words)
    argument = spec.user_job.command[index]
    flag = shell.quote(argument.partition("=")[0] + "=") if argument.startswith("--") else ""
    words[index] = f'{flag}"$here/{config_file}"'
    return " ".join(words)
