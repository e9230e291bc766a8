"""What a command works on: an engine, a workload, a cluster and a search space, all checked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engines import Engine, get_engine
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
from autotune.trialspec import StepPlan, TrialSpec


@dataclass(frozen=True)
class Problem:
    engine: Engine
    workload: Workload
    cluster: Cluster
    space: SearchSpace
    extra_rules: tuple[Rule, ...] = ()
    """Rules of the world rather than the engine (e.g. a replay table's recorded configs)."""

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


def load_problem(engine: str, model: str, cluster: str, space: str | None = None) -> Problem:
    chosen = get_engine(engine)
    path = Path(space) if space else default_space_path(chosen.name)
    if space and not path.is_file():
        raise InputError(f"search space file {space!r} does not exist")
    return Problem(
        engine=chosen,
        workload=load_workload(model),
        cluster=load_cluster(cluster),
        space=load_space(path, chosen.name, chosen.knobs),
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
