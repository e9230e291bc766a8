"""What a command works on: an engine, a workload, a cluster and a search space, all checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engines import Engine, get_engine
from autotune.engines.user_job import global_batch, job_space, parse_job
from autotune.errors import InputError
from autotune.space import (
    Enumeration,
    Rule,
    SearchSpace,
    TrainConfig,
    enumerate_space,
    first_violation,
)
from autotune.space.enumerate import build_config
from autotune.space.spacefile import default_space_path, load_space
from autotune.specs import Cluster, Workload, load_cluster, load_workload
from autotune.trialspec import StepPlan, TrialSpec, UserJob


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
                f"{self.cluster.world_size} with tp={config.tp}, pp={config.pp} "
                f"gives dp={config.dp}"
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
        return problem
    if chosen.job_worker is None:
        raise InputError(
            f"the {chosen.name} engine cannot run your own command; use --engine deepspeed "
            "(DeepSpeed scripts) or --engine torch (scripts that call autotune.step.done())"
        )
    job = parse_job(command, Path.cwd(), reads_ds_config=chosen.job_reads_config_file)
    if not chosen.job_reads_config_file:
        if space is None:
            raise InputError(
                "your script reads its knobs from $AUTOTUNE_CONFIG: list the ones it applies, "
                "and their values, in --space FILE"
            )
        return dataclasses.replace(problem, job=job)
    world = problem.cluster.world_size
    workload = dataclasses.replace(problem.workload, global_batch_size=global_batch(job, world))
    return dataclasses.replace(
        problem,
        workload=workload,
        space=job_space(problem.space, workload, world, derive_mbs=space is None),
        job=job,
    )


def problem_from_trial_file(path: Path) -> tuple[Problem, TrainConfig]:
    """The problem and config a trial.json describes, checked by the same rules."""
    from pydantic import ValidationError

    try:
        spec = TrialSpec.from_json(path.read_text())
    except (OSError, ValidationError) as exc:
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
