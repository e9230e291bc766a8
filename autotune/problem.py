"""What a command works on: an engine, a workload, a cluster and a search space, all checked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engines import Engine, get_engine
from autotune.errors import InputError
from autotune.space import Enumeration, SearchSpace, TrainConfig, enumerate_space, first_violation
from autotune.space.enumerate import build_config
from autotune.space.spacefile import default_space_path, load_space
from autotune.specs import Cluster, Workload, load_cluster, load_workload


@dataclass(frozen=True)
class Problem:
    engine: Engine
    workload: Workload
    cluster: Cluster
    space: SearchSpace

    def enumerate(self) -> Enumeration:
        return enumerate_space(self.space, self.workload, self.cluster, self.engine.rules)

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
        broken = first_violation(config, self.workload, self.cluster, self.engine.rules)
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
