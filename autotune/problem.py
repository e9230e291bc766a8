"""What a command works on: an engine, a workload, a cluster and a search space, all checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engines import Engine, get_engine, megatron_job, torchtitan_job
from autotune.engines.megatron import without_transformer_engine
from autotune.engines.user_job import (
    DEEPSPEED_KNOBS,
    global_batch,
    job_space,
    parse_job,
    users_knobs,
)
from autotune.errors import InputError
from autotune.space import (
    Enumeration,
    Rule,
    SearchSpace,
    TrainConfig,
    enumerate_space,
    first_violation,
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

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self.engine.rules + self.extra_rules

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
        """The config the user's own command runs today (a DeepSpeed or Hugging Face job's
        config file), with defaults for what it leaves unset; None for other commands, or
        when it breaks a rule here."""
        if self.job is None or self.job.framework != "deepspeed":
            return None
        try:
            return self.config(users_knobs(self.job))
        except InputError:
            return None

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
) -> Problem:
    """The problem the flags describe; with `command`, the user's own training command is
    the trial, its config file sets the global batch, and the space holds what it reads."""
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
        return _check_runs(dataclasses.replace(problem, space=_derived(problem.space, problem)))
    job = parse_job(command, Path.cwd(), chosen.name)
    return _check_runs(
        _with_job(problem, job, default_space=space is None, model_given=model != "tiny")
    )


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


def _derived(
    space: SearchSpace,
    problem: Problem,
    workload: Workload | None = None,
    knobs: frozenset[str] | None = None,
) -> SearchSpace:
    """The layout knobs the space leaves out, derived (`space.derive`): of the engine's knobs,
    or only those a user's command takes from a trial."""
    takes = problem.engine.knobs if knobs is None else problem.engine.knobs & knobs
    return derive_space(space, takes, workload or problem.workload, problem.cluster)


def _with_job(problem: Problem, job: UserJob, default_space: bool, model_given: bool) -> Problem:
    """The problem of tuning the user's command: the model and batch its framework says
    (Megatron-LM's flags; the DeepSpeed config's batch; torchtitan's batch and sequence,
    and its model where autotune has a preset of it), else `--model`; the space narrowed
    to what the framework takes from a trial."""
    world = problem.cluster.world_size
    workload, space = problem.workload, problem.space
    reads_model = False
    if job.framework == "script":
        if default_space:
            raise InputError(
                "your script reads its knobs from $AUTOTUNE_CONFIG: list the ones it applies, "
                "and their values, in --space FILE"
            )
        return dataclasses.replace(problem, job=job)
    if job.framework == "megatron":
        workload = megatron_job.workload_from_command(job.command, job.name)
        space = _derived(space, problem, workload)
        for knob, flag in megatron_job.given_overlaps(job.command).items():
            if knob not in space.values:
                space = space.offering(knob, (False, True), f"your command gives {flag}")
        if megatron_job.runs_local_attention(job.command):
            space = without_transformer_engine(space, "--transformer-impl local")
    elif job.framework == "deepspeed":
        if workload.is_moe:
            raise InputError(
                f"{workload.name}: your script's DeepSpeed-MoE layers set their ep_size in "
                "its code, where autotune cannot read or change it (tune the model without "
                "a command, or with --engine megatron)"
            )
        workload = dataclasses.replace(workload, global_batch_size=global_batch(job, world))
        space = _derived(space, problem, workload, DEEPSPEED_KNOBS)
        space = job_space(space, DEEPSPEED_KNOBS, workload, world, derive_mbs=default_space)
        space = _users_offload(space, users_knobs(job))
        reads_model = not model_given
    else:
        preset = torchtitan_job.model_preset(job.command, Path(job.workdir))
        if preset is None and not model_given:
            raise InputError(
                "autotune has no preset of the torchtitan model this command trains: "
                "describe it with --model (a preset like llama3-8b, or a YAML file)"
            )
        workload = load_workload(preset) if preset else workload
        batch, seq = torchtitan_job.batch_and_sequence(job.command, Path(job.workdir), world)
        workload = dataclasses.replace(workload, global_batch_size=batch, seq_length=seq)
        space = _derived(space, problem, workload, torchtitan_job.KNOBS)
        space = job_space(space, torchtitan_job.KNOBS, workload, world, derive_mbs=default_space)
        space = torchtitan_job.without_zero1(space)
    return dataclasses.replace(
        problem, workload=workload, space=space, job=job, reads_model=reads_model
    )


def _users_offload(space: SearchSpace, users: dict[str, Any]) -> SearchSpace:
    """A ds_config that offloads keeps offloading in every trial unless the space file
    lists the knob: a model that fits only offloaded must not be tried without it."""
    values, origins = dict(space.values), dict(space.origins)
    for knob in ("offload_optimizer", "offload_param"):
        if users.get(knob) and knob not in values:
            values[knob] = (True,)
            origins[knob] = "your ds_config offloads it (list it in --space to tune it)"
    return dataclasses.replace(space, values=values, origins=origins)


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
