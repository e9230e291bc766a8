"""Every valid config of a space, and how many each rule removed.

The space is walked knob by knob (layout first) rather than as a flat product: a rule is
checked as soon as the knobs it read are all set, and a rule it breaks there removes the whole
subtree at once. Which knobs a rule read is recorded while it runs (`_Reading`), so rules stay
plain predicates and a rule that reads everything (a replay table's) is simply checked last.
A space of millions of combinations with tens of thousands of valid configs is walked in a
fraction of a second instead of building and checking every combination.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import InputError
from autotune.space.config import KNOBS, TrainConfig
from autotune.space.rules import Rule
from autotune.space.spacefile import SearchSpace
from autotune.specs import Cluster, Workload


@dataclass(frozen=True)
class Enumeration:
    valid: tuple[TrainConfig, ...]
    total: int
    removed: dict[str, int] = field(hash=False)
    """Configs removed per rule, each counted once, under the first rule found broken: rules
    on the layout are found before rules on later knobs."""

    def require_some(self) -> Enumeration:
        if self.valid:
            return self
        detail = ", ".join(f"{name} removed {n}" for name, n in self.removed.items())
        raise InputError(
            f"the search space has no valid config: all {self.total} broke a rule ({detail})"
        )


def build_config(values: dict[str, Any], world_size: int) -> TrainConfig:
    """A config from knob values, with dp derived as world // (tp·pp·cp)."""
    return TrainConfig(**{**values, "dp": max(1, world_size // _model_parallel(values))})


class _Reading(TrainConfig):
    """A config that records which knobs are read from it (methods' reads included; a copy
    made by `dataclasses.replace` reads every field of this one). It equals the TrainConfig
    with the same knobs. A rule must read knobs as attributes (not `vars(c)`)."""

    def __getattribute__(self, name: str) -> Any:
        if name in KNOBS:
            with contextlib.suppress(AttributeError):  # a copy has no record of its own
                object.__getattribute__(self, "_read").add(name)
        return object.__getattribute__(self, name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrainConfig) and dataclasses.astuple(self) == (
            dataclasses.astuple(other)
        )

    __hash__ = TrainConfig.__hash__


def enumerate_space(
    space: SearchSpace, workload: Workload, cluster: Cluster, rules: Sequence[Rule]
) -> Enumeration:
    names = list(space.values)
    options = [space.values[n] for n in names]
    below = [math.prod(len(o) for o in options[depth:]) for depth in range(len(names) + 1)]
    world = cluster.world_size
    valid: list[TrainConfig] = []
    removed: Counter[str] = Counter()

    def visit(depth: int, assigned: dict[str, Any], pending: tuple[Rule, ...]) -> None:
        unset = set(names[depth:])
        if unset & {"tp", "pp", "cp"}:
            unset.add("dp")  # derived from them
        config = _Reading(**{**assigned, "dp": max(1, world // _model_parallel(assigned))})
        still: list[Rule] = []
        for rule in pending:
            object.__setattr__(config, "_read", set())
            ok = rule.ok(config, workload, cluster)
            if object.__getattribute__(config, "_read") & unset:
                still.append(rule)  # it read a knob not set yet: decided further down
            elif not ok:
                removed[rule.name] += below[depth]
                return
        if not still:  # every completion is valid
            for rest in itertools.product(*options[depth:]):
                valid.append(
                    build_config(
                        {**assigned, **dict(zip(names[depth:], rest, strict=True))}, world
                    )
                )
            return
        for value in options[depth]:
            visit(depth + 1, {**assigned, names[depth]: value}, tuple(still))

    visit(0, {}, tuple(rules))
    return Enumeration(valid=tuple(valid), total=below[0], removed=dict(removed))


def _model_parallel(values: dict[str, Any]) -> int:
    return int(values.get("tp", 1)) * int(values.get("pp", 1)) * int(values.get("cp", 1))
