"""Every valid config of a space, and how many each rule removed.

The space is walked knob by knob (layout first) rather than as a flat product: a rule is
checked as soon as the knobs it read are all set, and a rule it breaks there removes the whole
subtree at once. Which knobs a rule read is recorded while it runs (`_Reading`), so rules stay
plain predicates and a rule that reads everything (a replay table's) is simply checked last.
A rule must be a pure function of the config (read as attributes, not `vars(c)`), the
workload and the cluster, and keep nothing of the config it is given: the walk asks it again
only once a knob it read is set, remembers its answers by the values it read, and hands every
rule the one config object it walks the tree with. A space of millions of combinations with
tens of thousands of valid configs is walked in a fraction of a second instead of building
and checking every combination.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.errors import InputError
from autotune.space.config import KNOBS, TrainConfig
from autotune.space.rules import Rule
from autotune.space.spacefile import SearchSpace
from autotune.space.table import DTYPES, ConfigTable
from autotune.specs import Cluster, Workload


@dataclass(frozen=True)
class Enumeration:
    valid: ConfigTable
    """In walk order (layout knobs first, each knob's values in the space's order)."""
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
            try:  # noqa: SIM105 (contextlib.suppress costs more, read after read)
                object.__getattribute__(self, "_read").add(name)
            except AttributeError:  # a copy has no record of its own
                pass
        return object.__getattribute__(self, name)

    @classmethod
    def of(cls, knobs: dict[str, Any]) -> _Reading:
        """The config of these knobs, the others at their defaults, with an empty record:
        made by filling its fields directly, as a walk makes tens of thousands."""
        config = object.__new__(cls)
        fields = object.__getattribute__(config, "__dict__")
        fields.update(_DEFAULTS)
        fields.update(knobs)
        fields["_read"] = set()
        return config

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
    valid: list[tuple[int, tuple[Any, ...]]] = []
    """Subtrees whose every completion is valid, in walk order: (depth, the values set)."""
    removed: Counter[str] = Counter()

    unset_below = [set(names[depth:]) for depth in range(len(names) + 1)]
    for unset in unset_below:
        if unset & {"tp", "pp", "cp"}:
            unset.add("dp")  # derived from them
    set_at = {name: depth + 1 for depth, name in enumerate(names)}
    """The depth of the walk from which a knob is set."""
    set_above = [_values_of(names[:depth], ordered=True) for depth in range(len(names) + 1)]
    # One config walks the tree: a node sets its knob, the rest stay at their defaults.
    config = _Reading.of({})
    knobs = object.__getattribute__(config, "__dict__")
    read = knobs["_read"]

    def wakes(unread: AbstractSet[str], unset: set[str]) -> int:
        """The depth at which the first of these unset knobs is set (dp: when an unset tp,
        pp or cp is): a rule, a pure function of the knobs it read, answers the same until
        then."""
        if "dp" in unread:
            unread = (unread - {"dp"}) | ({"tp", "pp", "cp"} & unset)
        return min(set_at[name] for name in unread)

    answers: list[list[tuple[Callable[[dict[str, Any]], Any], frozenset[str], dict[Any, bool]]]]
    answers = [[] for _ in rules]
    """Per rule, the answers it gave, by the knobs it read and their values: a rule is a pure
    function of what it reads, so the same values give the same answer and the same reads."""

    def answer(i: int) -> tuple[bool, frozenset[str]]:
        for values_of, reads, seen in answers[i]:
            ok = seen.get(values_of(knobs))
            if ok is not None:
                return ok, reads
        read.clear()
        ok = rules[i].ok(config, workload, cluster)
        reads = frozenset(read)
        for values_of, known, seen in answers[i]:
            if known == reads:
                seen[values_of(knobs)] = ok
                break
        else:
            values_of = _values_of(reads)
            answers[i].append((values_of, reads, {values_of(knobs): ok}))
        return ok, reads

    def visit(depth: int, pending: tuple[tuple[int, int], ...]) -> None:
        unset = unset_below[depth]
        knobs["dp"] = max(1, world // (knobs["tp"] * knobs["pp"] * knobs["cp"]))
        still: list[tuple[int, int]] = []
        for i, wake in pending:
            if wake > depth:  # nothing it read has been set since it last answered
                still.append((i, wake))
                continue
            ok, reads = answer(i)
            if reads & unset:  # it read a knob not set yet: decided further down
                still.append((i, wakes(reads & unset, unset)))
            elif not ok:
                removed[rules[i].name] += below[depth]
                return
        if not still:  # every completion is valid
            valid.append((depth, set_above[depth](knobs)))
            return
        name = names[depth]
        for value in options[depth]:
            knobs[name] = value
            visit(depth + 1, tuple(still))
        knobs[name] = _DEFAULTS[name]

    visit(0, tuple((i, 0) for i in range(len(rules))))
    return Enumeration(
        valid=_columns(names, options, valid, world), total=below[0], removed=dict(removed)
    )


def _values_of(
    names: Sequence[str] | frozenset[str], ordered: bool = False
) -> Callable[[dict[str, Any]], Any]:
    """A fast reader of these knobs' values from a config's fields: a tuple (`ordered`: in
    the order given), or a hashable stand-in for one."""
    if not names:
        return lambda _: ()
    if len(names) == 1 and not ordered:
        return operator.itemgetter(*names)
    getter = operator.itemgetter(*names)
    if len(names) == 1:
        return lambda knobs: (getter(knobs),)
    return getter


def _columns(
    names: list[str],
    options: Sequence[Sequence[Any]],
    subtrees: list[tuple[int, tuple[Any, ...]]],
    world: int,
) -> ConfigTable:
    """The valid configs as columns, in walk order: the subtrees of one depth at once, each
    the values set above it repeated over the product of the options below it."""
    parts: list[dict[str, np.ndarray]] = []
    order: list[np.ndarray] = []
    for depth in sorted({d for d, _ in subtrees}):
        which = [i for i, (d, _) in enumerate(subtrees) if d == depth]
        above = list(zip(*(subtrees[i][1] for i in which), strict=True))
        size = math.prod(len(o) for o in options[depth:])
        columns: dict[str, np.ndarray] = {}
        for name, set_above in zip(names[:depth], above, strict=True):
            columns[name] = np.repeat(np.array(set_above, dtype=DTYPES[name]), size)
        inner = size
        for name, values in zip(names[depth:], options[depth:], strict=True):
            inner //= len(values)
            block = np.repeat(np.array(values, dtype=DTYPES[name]), inner)
            columns[name] = np.tile(block, len(which) * size // len(block))
        rows = len(which) * size
        for name, kind in DTYPES.items():
            if name not in columns:
                default = getattr(DEFAULT, name)
                columns[name] = np.full(rows, default, dtype=None if kind is str else kind)
        parallel = columns["tp"] * columns["pp"] * columns["cp"]
        columns["dp"] = np.maximum(1, world // parallel)
        parts.append(columns)
        order.append(np.repeat(which, size))
    table = ConfigTable.concatenate(parts)
    if len(parts) < 2:
        return table
    return table.take(np.argsort(np.concatenate(order), kind="stable"))


DEFAULT = TrainConfig()
_DEFAULTS = vars(DEFAULT)


def _model_parallel(values: dict[str, Any]) -> int:
    return int(values.get("tp", 1)) * int(values.get("pp", 1)) * int(values.get("cp", 1))
