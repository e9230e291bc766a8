"""Writes best/: the engine's config files, train.sh, nccl.env and best.yaml (with provenance).

Files are written to a fresh folder beside the target and renamed into place, so an export
is either complete or absent. Each export holds a marker file, `.autotune-export` (the study's
name), and only a folder with one is ever replaced (`--force`, and the run's own export to
results/<study>/best): a user's folder is never removed. A marked folder is autotune's even
where a user added files to it since, and those go with it when it is replaced.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import importlib.metadata
import platform
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

import optuna
import yaml

from autotune import shell
from autotune.engines import get_engine, get_framework
from autotune.engines.base import Engine
from autotune.errors import InputError
from autotune.export.nccl_verdict import nccl_verdict
from autotune.launchers import torchrun
from autotune.report.table import best_trial
from autotune.study.confirm import standings
from autotune.study.noise import study_spread
from autotune.study.storage import stored_job, stored_specs
from autotune.study.trial_attrs import TrialAttrs
from autotune.trial.spec import TRIAL_FILE, TrialSpec, nccl_environment

PACKAGES = ("autotune", "torch", "deepspeed", "megatron-core", "optuna")
COMMENTED_SUFFIXES = (".txt", ".py", ".yaml")
"""Engine files that take `#` comments, so a simulated export says so at their top."""

NVIDIA_CAUTION = (
    "NVIDIA documents NCCL_ALGO and NCCL_PROTO as debugging variables that "
    "production code should generally not set; keep them only while they win."
)


MARKER = ".autotune-export"
"""In every folder autotune exported; `--force` replaces only a folder that holds it."""


def export_best(study: optuna.Study, out: Path, force: bool = False) -> list[Path]:
    winner = best_trial(study)
    if winner is None:
        raise InputError(f"study {study.study_name!r} has no completed trial to export")
    verdict = nccl_verdict(study, winner)
    trial = verdict.trial
    check_out(out, force)
    engine_name, workload, cluster = stored_specs(study)
    engine = get_engine(engine_name)
    config = TrialAttrs.of(trial).config
    spec = TrialSpec(
        engine=engine_name,
        workload=workload,
        cluster=cluster,
        config=config,
        job=stored_job(study),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        _write_all(staging, study, trial, engine, spec, verdict.note)
        names = sorted(p.name for p in staging.iterdir())
        (staging / MARKER).write_text(f"{study.study_name}\n")
        replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out / name for name in names]  # what this export wrote, whoever renamed last


def check_out(out: Path, force: bool) -> None:
    """Refuse, in one line, an output path that is not a plain folder path (a symbolic link,
    a FIFO, a device, a file), a non-empty folder without `force`, and with it one that
    autotune did not export (no marker)."""
    if out.is_symlink():
        raise InputError(f"output folder {out} is a symbolic link; give the folder itself")
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(f"output folder {out} exists and is not a folder")
    if not any(out.iterdir()):
        return
    if not force:
        raise InputError(f"output folder {out} exists and is not empty (use --force)")
    if not (out / MARKER).is_file():
        raise InputError(
            f"output folder {out} was not exported by autotune (no {MARKER} in it); "
            "--force replaces only an export: remove it yourself or choose another --out"
        )


def replace_folder(staging: Path, out: Path) -> None:
    """Rename `staging` to `out`, moving an older `out` aside first. Every step is a rename,
    so workers of one study exporting at the same moment each leave a whole folder; the
    last to rename wins."""
    while True:
        try:
            staging.rename(out)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
        try:
            with contextlib.suppress(FileNotFoundError):  # another worker moved it first
                out.rename(aside)  # replaces the empty folder just made
        finally:
            shutil.rmtree(aside, ignore_errors=True)


def _write_all(
    folder: Path,
    study: optuna.Study,
    trial: optuna.trial.FrozenTrial,
    engine: Engine,
    spec: TrialSpec,
    nccl_note: str | None = None,
) -> None:
    attrs = TrialAttrs.of(trial)
    source = attrs.source or "measured"
    files = (
        get_framework(spec.job.framework).write_files(spec, folder)
        if spec.job is not None
        else engine.write_files(spec, folder)
    )
    for path in files:
        if path.suffix in COMMENTED_SUFFIXES and simulated_banner(trial):
            path.write_text("\n".join(simulated_banner(trial)) + "\n" + path.read_text())
    (folder / TRIAL_FILE).write_text(spec.to_json())
    env = nccl_environment(spec)
    (folder / "nccl.env").write_text(nccl_env_text(env, spec, trial, nccl_note))
    for name, text in (
        (
            "train.sh",
            train_script(engine, spec, trial, study.study_name, files[0].name if files else ""),
        ),
        ("train.sbatch", sbatch_script(spec, trial, study.study_name)),
    ):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    (folder / "best.yaml").write_text(
        yaml.safe_dump(
            {
                "source": source,
                "engine": engine.name,
                "workload": spec.workload.name,
                "cluster": spec.cluster.name,
                "config": spec.config.as_dict(),
                "metrics": {
                    "tokens_per_s": attrs.tokens_per_s,
                    "step_time_s": attrs.step_time_s,
                    "step_time_stdev_s": attrs.step_time_stdev_s,
                    "tflops_per_device": attrs.tflops_per_device,
                    "mfu": attrs.mfu,
                    "peak_memory_bytes": attrs.peak_memory_bytes,
                    "model_state_bytes": attrs.model_state_bytes,
                },
                "standing": _standing(study, trial),
                "provenance": provenance(study.study_name, trial.number, spec),
            },
            sort_keys=False,
        )
    )


def _standing(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> dict[str, Any] | None:
    """The config's mean over its trial and repeats, and how sure it is (study.confirm)."""
    found = next((s for s in standings(study) if s.trial.number == trial.number), None)
    if found is None:
        return None
    between = study_spread(study)
    return {
        "tokens_per_s": found.tokens_per_s,
        "interval_95": found.interval(between),
        "measurements": len(found.values),
        "between_trial_spread": between.relative if between is not None else None,
    }


def provenance(study_name: str, trial_number: int, spec: TrialSpec) -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "study": study_name,
        "trial": trial_number,
        "versions": {**versions, "python": platform.python_version()},
        "host": socket.gethostname(),
        "device": spec.cluster.device.name,
        "backend": spec.cluster.backend,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


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
) -> str:
    lines = [
        *simulated_banner(trial),
        shell.comment(
            f"NCCL settings of study trial {trial.number} ({spec.cluster.name}, "
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
"""train.sh on one node of several: where they meet and which node this is, set by
train.sbatch or by hand."""


def sbatch_script(spec: TrialSpec, trial: optuna.trial.FrozenTrial, study_name: str) -> str:
    """A SLURM job for the best config: one task per node, each running train.sh with the
    rendezvous on the job's first node. Submit it from this folder: `sbatch train.sbatch`."""
    cluster = spec.cluster
    devices = (
        f"--gpus-per-node={cluster.devices_per_node}"
        if cluster.backend == "nccl"
        else f"--cpus-per-task={cluster.devices_per_node}"
    )
    options = [
        f"--job-name=autotune-{re.sub(r'[^A-Za-z0-9_.-]', '_', study_name)}",
        f"--nodes={cluster.nodes}",
        "--ntasks-per-node=1",
        devices,
        "--output=train-%j.log",
        *cluster.slurm.options(),
    ]
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            *(shell.sbatch_line(option) for option in options),
            *simulated_banner(trial),
            shell.comment(
                f"autotune: best config of study {study_name!r}, trial {trial.number}, on "
                f"{cluster.name}. Add --time for your run; submit from this folder."
            ),
            "set -euo pipefail",
            'cd "${SLURM_SUBMIT_DIR:-.}"',
            torchrun.NODE_ADDRESS,
            'head=$(node_addr "$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)")',
            f'export RDZV_ENDPOINT="$head:{torchrun.RDZV_PORT}"',
            "exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 "
            "bash -c 'NODE_RANK=$SLURM_NODEID exec ./train.sh'",
            "",
        ]
    )


def train_script(
    engine: Engine,
    spec: TrialSpec,
    trial: optuna.trial.FrozenTrial,
    study_name: str,
    job_config: str = "",
) -> str:
    """torchrun for the best config with autotune's worker, or the user's own command with
    `job_config` (a file in this folder) where it was tuned; one node or, with NNODES > 1, a
    c10d rendezvous at $RDZV_ENDPOINT with this node's $NODE_RANK."""
    cluster = spec.cluster
    attrs = TrialAttrs.of(trial)
    tps = attrs.tokens_per_s
    measured = f"{tps:,.0f} tokens/s" if tps else "?"
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
                f"autotune: best config of study {study_name!r}, trial {trial.number} "
                f"({attrs.source or 'measured'}: {measured})."
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
