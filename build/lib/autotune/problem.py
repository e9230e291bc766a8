"""What a command works on: an engine, a workload, a cluster and a search space, all checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.engines import Engine, Framework, get_engine, get_framework
from autotune.engines.command import parse_job
from autotune.engines.framework import JobProblem
from autotune.errors import InputError
from autotune.space import (
    Enumeration,
    Rule,
    SearchSpace,
    TrainConfig,
    enumerate_space,
    first_violation,
    parse_overrides,
)
from autotune.space.derive import derive_space
from autotune.space.enumerate import build_config
from autotune.space.spacefile import default_space_path, load_space
from autotune.specs import Cluster, Workload, load_cluster, load_workload
from autotune.trial.spec import StepPlan, TrialSpec, UserJob


@dataclass(frozen=True)
class Problem:
    engine: Engine
    workload: Workload
    cluster: Cluster
    space: SearchSpace
    extra_rules: tuple[Rule, ...] = ()
    """Rules of the world rather than the engine (e.g. a replay table's recorded configs)."""
    job: UserJob | None = None
    """The user's own training command, when the trials run it."""
    reads_model: bool = False
    """The workload is a stand-in until the model is read from the user's DeepSpeed job (no
    `--model` was given): `model_probe.read_model` runs their config once to read it."""
    stated: dict[str, Any] = field(default_factory=dict, hash=False)
    """The user's own knob values as they stated them (`--users-config`, or the space file's
    `yours:`), for a command whose framework cannot read its config."""
    stated_from: str = ""

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self.engine.rules + self.extra_rules

    @property
    def framework(self) -> Framework | None:
        """The framework that runs the user's command; None for autotune's own worker."""
        return get_framework(self.job.framework) if self.job else None

    def trial_spec(self, config: TrainConfig, steps: StepPlan) -> TrialSpec:
        """What a worker is told to run for `config` on this problem."""
        return TrialSpec(
            engine=self.engine.name,
            workload=self.workload,
            cluster=self.cluster,
            config=config,
            steps=steps,
            job=self.job,
        )

    def users_config(self) -> TrainConfig | None:
        """The config the user's own command runs today, with defaults for what it leaves
        unset; None where it is not known, or when it breaks a rule here."""
        return self.users_reference()[0]

    def users_reference(self) -> tuple[TrainConfig | None, str]:
        """The config the user's own command runs today (a DeepSpeed or Hugging Face job's
        config file, as the framework fills it; else the values the user stated) and where
        it came from; (None, why) where it is not known or breaks a rule here."""
        if self.job is None or self.framework is None:
            return None, "no command of yours is tuned"
        knobs = self.framework.users_knobs(self.job, self.workload, self.cluster.world_size)
        source = self.framework.users_config_source
        if knobs is None and self.stated:
            knobs, source = self.stated, self.stated_from
        if knobs is None:
            return None, (
                "autotune cannot read your config from your command: state its values with "
                "--users-config KNOB=VALUE,... (or `yours:` in the space file)"
            )
        try:
            return self.config(knobs), source
        except InputError as exc:
            return None, f"your config ({source}) cannot run here: {exc}"

    def enumerate(self) -> Enumeration:
        return enumerate_space(self.space, self.workload, self.cluster, self.rules)

    def config(self, overrides: dict[str, Any]) -> TrainConfig:
        """A single config from defaults plus `--config` overrides, checked by every rule."""
        unused = set(overrides) - self.engine.knobs - {"tp", "pp", "dp"}
        if unused:
            raise InputError(
                f"--config: the {self.engine.name} engine does not use {', '.join(sorted(unused))}"
            )
        config = build_config(
            {k: v for k, v in overrides.items() if k != "dp"}, self.cluster.world_size
        )
        if "dp" in overrides and overrides["dp"] != config.dp:
            raise InputError(
                f"--config: dp={overrides['dp']} but the world size "
                f"{self.cluster.world_size} with tp={config.tp}, pp={config.pp}, "
                f"cp={config.cp} gives dp={config.dp}"
            )
        broken = first_violation(config, self.workload, self.cluster, self.rules)
        if broken is not None:
            raise InputError(f"config {config.label()} breaks rule {broken.name}: {broken.reason}")
        return config


def load_problem(
    engine: str,
    model: str,
    cluster: str,
    space: str | None = None,
    command: Sequence[str] = (),
    users_config: str = "",
) -> Problem:
    """The problem the flags describe; with `command`, the user's own training command is
    the trial, its config file sets the global batch, and the space holds what it reads.
    `users_config`: the knobs that command runs today (`--users-config`), where autotune
    cannot read them."""
    chosen = get_engine(engine)
    path = Path(space) if space else default_space_path(chosen.name)
    if space and not path.is_file():
        raise InputError(f"search space file {space!r} does not exist")
    problem = Problem(
        engine=chosen,
        workload=load_workload(model),
        cluster=load_cluster(cluster),
        space=load_space(path, chosen.name, chosen.knobs),
    )
    if not command:
        if users_config:
            raise InputError("--users-config names the config of your own command: give it")
        return _check_runs(dataclasses.replace(problem, space=_derived(problem)))
    job = parse_job(command, Path.cwd(), chosen.name)
    problem = _with_job(problem, job, space_given=space is not None, model_given=model != "tiny")
    return _check_runs(_with_stated(problem, users_config))


def _with_stated(problem: Problem, text: str) -> Problem:
    """The problem with the user's own values as they stated them (`--users-config`, else the
    space file's `yours:`) among the space's, where their framework cannot read them."""
    stated, source = parse_overrides(text, "--users-config"), "--users-config"
    if not stated and problem.space.yours:
        stated, source = problem.space.yours, f"`yours:` in {problem.space.source}"
    if not stated:
        return problem
    assert problem.job is not None and problem.framework is not None
    framework, world = problem.framework, problem.cluster.world_size
    if framework.users_knobs(problem.job, problem.workload, world) is not None:
        raise InputError(
            f"{source}: autotune reads your config from {framework.users_config_source}; drop it"
        )
    unused = set(stated) - problem.engine.knobs - {"tp", "pp"}
    if unused:
        raise InputError(
            f"{source}: the {problem.engine.name} engine does not use {', '.join(sorted(unused))}"
        )
    space = problem.space.including(stated, source)
    return dataclasses.replace(problem, space=space, stated=stated, stated_from=source)


def _check_runs(problem: Problem) -> Problem:
    """A mixture of experts and FP8 need the engine to run them, FP8 the devices to have
    FP8 tensor cores."""
    if problem.workload.is_moe and not problem.engine.traits.runs_moe:
        raise InputError(
            f"{problem.workload.name}: the {problem.engine.name} engine does not build "
            "mixture-of-experts layers (use --engine megatron or deepspeed)"
        )
    recipe, device = problem.workload.fp8, problem.cluster.device
    if recipe == "none":
        return problem
    if not problem.engine.traits.runs_fp8:
        raise InputError(
            f"fp8 {recipe}: the {problem.engine.name} engine does not train in FP8 "
            "(use --engine megatron, which runs it through Transformer Engine)"
        )
    if "fp8" not in device.peak_flops:
        raise InputError(f"fp8 {recipe}: {device.name} has no FP8 tensor cores")
    if recipe == "mxfp8" and device.generation != "blackwell":
        raise InputError(f"fp8 mxfp8: block-scaled FP8 needs Blackwell, not {device.name}")
    return problem


def _derived(problem: Problem) -> SearchSpace:
    """The layout knobs the space leaves out, derived (`space.derive`)."""
    return derive_space(problem.space, problem.engine.knobs, problem.workload, problem.cluster)


def _with_job(problem: Problem, job: UserJob, space_given: bool, model_given: bool) -> Problem:
    """The problem of tuning the user's command, as its framework narrows it: the model and
    batch the job trains, the space restricted to what it takes from a trial."""
    narrowed = get_framework(job.framework).narrow(
        job,
        JobProblem(
            workload=problem.workload,
            space=problem.space,
            cluster=problem.cluster,
            engine_knobs=problem.engine.knobs,
            space_given=space_given,
            model_given=model_given,
        ),
    )
    return dataclasses.replace(
        problem,
        workload=narrowed.workload,
        space=narrowed.space,
        job=job,
        reads_model=narrowed.reads_model,
    )


def problem_from_trial_file(path: Path) -> tuple[Problem, TrainConfig]:
    """The problem and config a trial.json describes, checked by the same rules."""
    try:
        spec = TrialSpec.from_json(path.read_text())
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: not a readable trial file: {first}") from None
    engine = get_engine(spec.engine)
    problem = Problem(
        engine=engine,
        workload=spec.workload,
        cluster=spec.cluster,
        space=load_space(default_space_path(engine.name), engine.name, engine.knobs),
    )
    broken = first_violation(spec.config, spec.workload, spec.cluster, engine.rules)
    if broken is not None:
        raise InputError(f"{path}: config breaks rule {broken.name}: {broken.reason}")
    return problem, spec.config
