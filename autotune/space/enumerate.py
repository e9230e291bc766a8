"""Every valid config of a space, and how many each rule removed."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import InputError
from autotune.space.config import TrainConfig
from autotune.space.rules import Rule, first_violation
from autotune.space.spacefile import SearchSpace
from autotune.specs import Cluster, Workload


@dataclass(frozen=True)
class Enumeration:
    valid: tuple[TrainConfig, ...]
    total: int
    removed: dict[str, int] = field(hash=False)
    """Configs removed per rule, each counted once under the first rule it breaks."""

    def require_some(self) -> Enumeration:
        if self.valid:
            return self
        detail = ", ".join(f"{name} removed {n}" for name, n in self.removed.items())
        raise InputError(
            f"the search space has no valid config: all {self.total} broke a rule ({detail})"
        )


def build_config(values: dict[str, Any], world_size: int) -> TrainConfig:
    """A config from knob values, with dp derived as world // (tp·pp)."""
    tp, pp = values.get("tp", 1), values.get("pp", 1)
    return TrainConfig(**{**values, "dp": max(1, world_size // (tp * pp))})


def enumerate_space(
    space: SearchSpace, workload: Workload, cluster: Cluster, rules: Sequence[Rule]
) -> Enumeration:
    names = list(space.values)
    valid: list[TrainConfig] = []
    removed: Counter[str] = Counter()
    combos = list(itertools.product(*(space.values[n] for n in names)))
    for combo in combos:
        config = build_config(dict(zip(names, combo, strict=True)), cluster.world_size)
        broken = first_violation(config, workload, cluster, rules)
        if broken is None:
            valid.append(config)
        else:
            removed[broken.name] += 1
    return Enumeration(valid=tuple(valid), total=len(combos), removed=dict(removed))
