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
import os
import platform
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

import optuna
import psutil
import yaml

from autotune.engines import get_engine, get_framework
from autotune.engines.base import Engine
from autotune.errors import InputError
from autotune.export.scripts import nccl_env_text, simulated_banner, train_script
from autotune.launchers import ExportContext, exported_files
from autotune.study.record.storage import stored_job, stored_specs
from autotune.study.record.trial_attrs import TrialAttrs, launchers_of
from autotune.study.search.economics import account
from autotune.study.slice.cost import slice_summary
from autotune.study.verdict.noise import study_spread
from autotune.study.verdict.parity_verdict import study_parity
from autotune.study.verdict.winner import Verdict, decide
from autotune.trial.spec import TRIAL_FILE, TrialSpec, nccl_environment
from autotune.units import display_label, human_bytes, human_ms, knob_text

PACKAGES = ("autotune", "torch", "deepspeed", "megatron-core", "optuna")
COMMENTED_SUFFIXES = (".txt", ".py", ".yaml")
"""Engine files that take `#` comments, so a simulated export says so at their top."""


MARKER = ".autotune-export"
"""In every folder autotune exported; `--force` replaces only a folder that holds it."""


def exported_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The trial whose config the export writes: the winner, or its layout with NCCL's
    defaults where its NCCL settings are not surely faster (`study.verdict`)."""
    verdict = decide(study)
    return verdict.trial if verdict is not None else None


def export_best(study: optuna.Study, out: Path, force: bool = False) -> list[Path]:
    verdict = decide(study)
    if verdict is None:
        raise InputError(f"study {study.study_name!r} has no completed trial to export")
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
    remove_stale_staging(out)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-{os.getpid()}-", dir=out.parent))
    try:
        _write_all(staging, study, verdict, engine, spec)
        names = sorted(p.name for p in staging.iterdir())
        (staging / MARKER).write_text(f"{study.study_name}\n")
        replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out / name for name in names]  # what this export wrote, whoever renamed last


def remove_stale_staging(out: Path) -> None:
    """Remove what an export to `out` that was killed (SIGKILL: no cleanup ran) left beside
    it, `.<name>-<pid>-*`, where that process is gone; a live worker's is left alone."""
    for left in out.parent.glob(f".{out.name}-*-*"):
        pid = left.name.removeprefix(f".{out.name}-").split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)) and left.is_dir():
            shutil.rmtree(left, ignore_errors=True)


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
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}-{os.getpid()}-old-", dir=out.parent))
        try:
            with contextlib.suppress(FileNotFoundError):  # another worker moved it first
                out.rename(aside)  # replaces the empty folder just made
        finally:
            shutil.rmtree(aside, ignore_errors=True)


def _write_all(
    folder: Path, study: optuna.Study, verdict: Verdict, engine: Engine, spec: TrialSpec
) -> None:
    trial, name = verdict.trial, verdict.name()
    source = TrialAttrs.of(trial).source or "measured"
    standing = _standing(study, verdict)
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
    chosen = verdict.exported.first
    (folder / "nccl.env").write_text(nccl_env_text(env, spec, trial, verdict.nccl_note, chosen))
    job_config = files[0].name if files else ""
    context = ExportContext(
        spec=spec, study_name=study.study_name, name=name, banner=tuple(simulated_banner(trial))
    )
    scripts = {
        "train.sh": train_script(
            engine, spec, trial, study.study_name, job_config, standing, name
        ),
        **exported_files(launchers_of(study), context),
    }
    for file, text in scripts.items():
        (folder / file).write_text(text)
        (folder / file).chmod(0o755)
    (folder / "best.yaml").write_text(
        yaml.safe_dump(
            {
                "source": source,
                "engine": engine.name,
                "workload": spec.workload.name,
                "cluster": spec.cluster.name,
                "config": spec.config.as_dict(),
                "summary": _summary(spec, _metrics(trial, standing), standing),
                "metrics": _metrics(trial, standing),
                "standing": standing,
                "economics": account(study, spec.cluster, verdict.figures),
                **slice_summary(study, spec.cluster),
                **({"parity": _parity(study, trial, spec)} if spec.job is not None else {}),
                "provenance": provenance(study.study_name, chosen, spec, verdict.figure_trials),
            },
            sort_keys=False,
        )
    )


def _summary(
    spec: TrialSpec, metrics: dict[str, Any], standing: dict[str, Any] | None
) -> dict[str, str]:
    """What a person reads first, in words and units (the sections below keep the exact
    machine values): the config as users write it, bucket sizes in elements, the throughput
    with its 95% range, step time, memory, and how it compares with the user's config."""
    config = spec.config
    summary = {"config": display_label(config)}
    for knob in ("reduce_bucket", "allgather_bucket"):
        if knob in spec.config.differs_from_default() or spec.engine == "deepspeed":
            summary[knob] = f"{knob_text(knob, getattr(config, knob))} elements"
    tps = metrics.get("tokens_per_s")
    if tps:
        spread = ""
        if standing and standing.get("range_95"):
            low, high = standing["range_95"]
            spread = f" (95% range {low:,.0f}-{high:,.0f})"
        summary["throughput"] = f"{tps:,.0f} tokens/s over the cluster{spread}"
    summary["step"] = human_ms(metrics.get("step_time_s"))
    summary["peak_memory_per_rank"] = human_bytes(metrics.get("peak_memory_bytes"))
    yours = (standing or {}).get("your_config")
    if yours and yours.get("ratio"):
        summary["against_your_config"] = f"{yours['ratio']:.2f}x"
    return summary


def _metrics(trial: optuna.trial.FrozenTrial, standing: dict[str, Any] | None) -> dict[str, Any]:
    """The exported trial's metrics, its throughput figures (tokens/s, step time, TFLOP/s,
    MFU) scaled to the config's standing, so that every file states the summary's figure."""
    attrs = TrialAttrs.of(trial)
    tps = standing["tokens_per_s"] if standing else attrs.tokens_per_s
    scale = standing["tokens_per_s"] / trial.value if standing and trial.value else 1.0
    step = attrs.step_time_s
    return {
        "tokens_per_s": tps,
        "step_time_s": step and step / scale,
        "step_time_stdev_s": attrs.step_time_stdev_s,
        "tflops_per_device": attrs.tflops_per_device and attrs.tflops_per_device * scale,
        "mfu": attrs.mfu and attrs.mfu * scale,
        "peak_memory_bytes": attrs.peak_memory_bytes,
        "model_state_bytes": attrs.model_state_bytes,
    }


def _standing(study: optuna.Study, verdict: Verdict) -> dict[str, Any]:
    """The exported config's throughput, its interval and ratios as the summary states them
    (`study.verdict.figures`); for a config exported in the winner's place (NCCL's defaults kept),
    the mean of its trial and repeats."""
    if verdict.exported is verdict.winner:
        return verdict.figures.as_dict()
    found, between = verdict.exported, study_spread(study)
    return {
        "tokens_per_s": found.tokens_per_s,
        "interval_95": found.interval(between),
        "measurements": len(found.values),
        "between_trial_spread": between.relative if between is not None else None,
    }


def _parity(
    study: optuna.Study, trial: optuna.trial.FrozenTrial, spec: TrialSpec
) -> dict[str, Any]:
    """The exported config's longest run against the user's config's, with the study's count
    of configs that train another model and why (`study.verdict.parity_verdict`)."""
    key = TrialAttrs.of(trial).config_key
    return study_parity(study, key, spec.workload.precision).as_dict()


def provenance(
    study_name: str, trial_number: int, spec: TrialSpec, figure_trials: tuple[int, ...] = ()
) -> dict[str, Any]:
    """Where the export comes from: the study, the trial that chose its config and those its
    figures come from, the versions, host and device, and when."""
    versions: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "study": study_name,
        "trial": trial_number,
        "figures_from_trials": list(figure_trials or (trial_number,)),
        "versions": {**versions, "python": platform.python_version()},
        "host": socket.gethostname(),
        "device": spec.cluster.device.name,
        "backend": spec.cluster.backend,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
