"""The users' commands the torch engine runs: torchtitan (`-m torchtitan.train`, its flags
rewritten, its metrics lines read; `torchtitan.py`), and any loop that reads its knobs from
$AUTOTUNE_CONFIG and calls `autotune.step.done()` after each optimizer step. Pure."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from autotune.engines.framework import Framework, JobProblem, with_workload
from autotune.engines.torch import torchtitan
from autotune.engines.torch.exports import write_parallel_file
from autotune.errors import InputError
from autotune.specs import load_workload
from autotune.step import CONFIG_ENV
from autotune.trial.spec import TrialSpec, UserJob

KNOBS_FILE = "autotune_config.json"
"""The trial's knobs, for a script tuned through autotune.step."""


class Torchtitan(Framework):
    """`-m torchtitan.train` with its TOML and flags: the model, batch and sequence read as
    torchtitan reads them, the tuned flags added after the user's own."""

    name = "torchtitan"
    engine = "torch"
    rank_module = "autotune.engines.torch.titan_worker"

    def recognises(self, command: Sequence[str]) -> bool:
        return torchtitan.is_torchtitan(command)

    def narrow(self, job: UserJob, problem: JobProblem) -> JobProblem:
        workdir = Path(job.workdir)
        preset = torchtitan.model_preset(job.command, workdir)
        if preset is None and not problem.model_given:
            raise InputError(
                "autotune has no preset of the torchtitan model this command trains: "
                "describe it with --model (a preset like llama3-8b, or a YAML file)"
            )
        workload = load_workload(preset) if preset else problem.workload
        world = problem.cluster.world_size
        batch, seq = torchtitan.batch_and_sequence(job.command, workdir, world)
        workload = dataclasses.replace(workload, global_batch_size=batch, seq_length=seq)
        narrowed = with_workload(problem, workload, torchtitan.KNOBS)
        space = torchtitan.with_users_layout(
            torchtitan.without_zero1(narrowed.space),
            job.command,
            workdir,
            world,
            batch,
            derive_mbs=not problem.space_given,
        )
        return dataclasses.replace(narrowed, space=space)

    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        return [write_parallel_file(spec, folder)]

    def trial_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        return torchtitan.trial_argv(spec)

    def export_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        return torchtitan.export_argv(spec)


class StepHelper(Framework):
    """A script that reads the trial's knobs from the JSON file $AUTOTUNE_CONFIG names and
    calls `autotune.step.done()` after each optimizer step; its space file lists the knobs
    it applies."""

    name = "script"
    engine = "torch"
    rank_module = "autotune.engines.torch.script_worker"
    forked = True
    fallback = True

    def recognises(self, command: Sequence[str]) -> bool:
        return True

    def narrow(self, job: UserJob, problem: JobProblem) -> JobProblem:
        if not problem.space_given:
            raise InputError(
                "your script reads its knobs from $AUTOTUNE_CONFIG: list the ones it applies, "
                "and their values, in --space FILE"
            )
        return problem

    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        """The trial's knobs for a script that reads them itself ($AUTOTUNE_CONFIG)."""
        w, c = spec.workload, spec.config
        knobs = {
            **c.as_dict(),
            "grad_accum": c.grad_accum(w.global_batch_size),
            "global_batch_size": w.global_batch_size,
            "world_size": spec.cluster.world_size,
        }
        path = folder / KNOBS_FILE
        path.write_text(json.dumps(knobs, indent=2) + "\n")
        return [path]

    def trial_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        return list(spec.user_job.command)

    def export_environment(self, config_path: str) -> dict[str, str]:
        return {CONFIG_ENV: f"$here/{config_path}"}
