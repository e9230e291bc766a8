"""What every framework provides: a way of running the user's own training command as a trial.

A framework (a DeepSpeed script, Hugging Face's Trainer, Megatron-LM, torchtitan, a loop with
the `autotune.step` helper) lives in its engine's folder (`engines/<engine>/jobs.py`) and is
registered by that engine (`Engine.frameworks`). It recognises a command, reads the job as the
framework itself reads it, narrows the problem to what the job lets autotune change, writes a
trial's files and command and the export's, and names the module that measures it on each
rank. Pure: no torch. tests/contract/test_framework_contract.py runs every framework.
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from autotune.errors import InputError
from autotune.space import SearchSpace
from autotune.space.derive import derive_space
from autotune.specs import Cluster, Workload
from autotune.trial.spec import COMMAND_FILE, TrialSpec, UserJob


@dataclass(frozen=True, kw_only=True)
class JobProblem:
    """What a framework narrows for the user's command: the workload and space the study
    plans, from the engine's and the flags'."""

    workload: Workload
    space: SearchSpace
    cluster: Cluster
    engine_knobs: frozenset[str]
    """Every knob the engine reads; a framework takes some of them from a trial."""
    space_given: bool
    """A `--space` file was given: its values are the user's, not derived."""
    model_given: bool
    """`--model` was given: the workload is the user's description of their model."""
    reads_model: bool = False
    """The workload is a stand-in until a run of the user's config reads the model."""

    def derived(self, knobs: frozenset[str], workload: Workload | None = None) -> SearchSpace:
        """The layout knobs the space leaves out, derived for the `knobs` the command takes
        from a trial (`space.derive`)."""
        return derive_space(
            self.space, self.engine_knobs & knobs, workload or self.workload, self.cluster
        )


class Framework(ABC):
    """One way of running a user's training command. A new one declares `name`, `engine`,
    `rank_module` (and `forked`, `fallback` where they hold), implements the abstract methods
    in its engine's `jobs.py`, and is added to that engine's `frameworks`."""

    name: ClassVar[str]
    """Stored with the study (`UserJob.framework`)."""
    engine: ClassVar[str]
    """The engine whose knobs, rules and estimator the study uses."""
    rank_module: ClassVar[str]
    """The module `autotune.rank` runs on every rank of a trial: it runs the command from
    `COMMAND_FILE` and measures its steps."""
    forked: ClassVar[bool] = False
    """Its trials may run forked from a pool rank that imported `rank_module` (on gloo)."""
    fallback: ClassVar[bool] = False
    """Takes any command of its engine that no other framework recognises."""
    users_config_source: ClassVar[str] = "your command"
    """Where `users_knobs` reads the user's config, in words."""

    @abstractmethod
    def recognises(self, command: Sequence[str]) -> bool:
        """Whether `command` (the script or `-m module` and its arguments) is this
        framework's."""

    def parse(self, command: Sequence[str], workdir: Path) -> UserJob:
        """The job, checked as far as reading the command allows."""
        return UserJob(command=tuple(command), framework=self.name, workdir=str(workdir))

    @abstractmethod
    def narrow(self, job: UserJob, problem: JobProblem) -> JobProblem:
        """The workload this job trains (its global batch as the framework computes it) and
        the space restricted to what the job takes from a trial; InputError for a job autotune
        cannot tune faithfully."""

    def users_knobs(
        self, job: UserJob, workload: Workload, world_size: int
    ) -> dict[str, Any] | None:
        """The knobs of the config the user's command runs today, exactly as its framework
        runs it: the framework's own defaults for what the job leaves out, and values it
        derives from the model (`workload`, e.g. the Trainer's "auto" buckets from the hidden
        size) or the ranks (`world_size`). None: not known. A study measures it first."""
        return None

    @abstractmethod
    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        """The files the command reads for this config, as the export writes them, the first
        one the file its config argument names; [] where flags carry everything."""

    def write_trial_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        """`write_files` for a trial: without the job's side effects (e.g. DeepSpeed's
        monitors) where a file holds them."""
        return self.write_files(spec, folder)

    @abstractmethod
    def trial_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        """The command a trial runs (`config_path`: where its config file lies), with the
        trial's knobs and without the job's side effects."""

    def export_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        """The command for training with the tuned config: everything the job does kept."""
        return self.trial_argv(spec, config_path)

    def export_environment(self, config_path: str) -> dict[str, str]:
        """Variables the exported command needs (shell words, `$here` the export's folder)."""
        return {}

    def trial_environment(self) -> dict[str, str]:
        """Variables a trial's ranks run with, beside the engine's: no external reporting
        (`TRIAL_ENVIRONMENT`); the export sets none of them."""
        return dict(TRIAL_ENVIRONMENT)


TRIAL_ENVIRONMENT = {"WANDB_MODE": "disabled"}
"""Weights & Biases' own switch (`wandb.init` then logs nothing and starts no service), for any
command that reports to it, whatever its framework."""


def write_command(spec: TrialSpec, framework: Framework, folder: Path, config_path: str) -> Path:
    """`COMMAND_FILE`: the command this trial's ranks run."""
    path = folder / COMMAND_FILE
    path.write_text(json.dumps(framework.trial_argv(spec, config_path)) + "\n")
    return path


def narrowed_to(
    space: SearchSpace,
    knobs: frozenset[str],
    workload: Workload,
    world_size: int,
    derive_mbs: bool,
) -> SearchSpace:
    """The engine's space narrowed to the `knobs` a command takes from the trial: others
    keep their defaults. With `derive_mbs` (no space file given) micro-batches are every
    divisor of each rank's share of the batch, as DeepSpeed's autotuner tries."""
    values = {k: v for k, v in space.values.items() if k in knobs}
    ignored = [k for k, v in space.values.items() if k not in knobs and len(v) > 1]
    if ignored and not derive_mbs:
        raise InputError(
            f"{space.source}: the command sets {', '.join(sorted(ignored))} in its own "
            f"code, not from the trial; tunable: {', '.join(sorted(knobs))}"
        )
    origins = {k: v for k, v in space.origins.items() if k in values}
    if derive_mbs:
        per_rank = max(1, workload.global_batch_size // world_size)
        values["mbs"] = tuple(m for m in range(1, per_rank + 1) if per_rank % m == 0)
        origins["mbs"] = f"divisors of each rank's share ({per_rank}) of the command's batch"
    return SearchSpace(
        engine=space.engine, values=values, source=f"{space.source} (command)", origins=origins
    )


def with_workload(problem: JobProblem, workload: Workload, knobs: frozenset[str]) -> JobProblem:
    """`problem` for `workload`, its space derived and narrowed to `knobs`."""
    space = problem.derived(knobs, workload)
    space = narrowed_to(
        space, knobs, workload, problem.cluster.world_size, derive_mbs=not problem.space_given
    )
    return dataclasses.replace(problem, workload=workload, space=space)
