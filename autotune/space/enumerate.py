"""Every valid config of a space, and how many each rule removed.

The space is walked knob by knob (layout first) rather than as a flat product: a rule is
checked as soon as the knobs it read are all set, and a rule it breaks there removes the whole
subtree at once. Which knobs a rule read is recorded while it runs (`_Reading`), so rules stay
plain predicates and a rule that reads everything (a replay table's) is simply checked last.
A rule must be a pure function of the config (read as attributes, not `vars(c)`), the
workload and the cluster, and keep nothing of the config it is given: the walk asks it again
only once a knob it read is set, remembers its answers by the values it read, and hands every
rule the one config object it walks the tree with.

A subtree is walked once for every node with the same rules pending and the same values of
the knobs set above that the subtree's rules read (`_Subtree`): late knobs that rules read only
with a few early ones (buckets with overlap, recompute depth with recompute) are not walked
again under every layout. The valid configs come out as blocks that numpy expands. So a space
of hundreds of millions of combinations costs about what its valid configs and distinct
subtrees cost, not what building and checking every combination would
(benchmarks/plan.py times both).
"""

from __future__ import annotations

import dataclasses
import functools
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


@dataclass(frozen=True, eq=False)
class _Subtree:
    """The valid configs below one node of the walk, relative to it: the same for every node
    of that depth whose pending rules, and the values of the knobs set above that the
    subtree's rules read, are the same. Found once, it stands for each such node."""

    entries: list[_Entry]
    """Relative to the node: (depth below it, the values set from it down, a subtree)."""
    removed: Counter[str]
    depends_on: frozenset[str]


_Entry = tuple[int, tuple[Any, ...], "_Subtree | None"]
"""A block of valid configs: the values set down to a depth, then every completion below (None)
or a subtree's configs."""


def enumerate_space(
    space: SearchSpace, workload: Workload, cluster: Cluster, rules: Sequence[Rule]
) -> Enumeration:
    walk = _Walk(space, workload, cluster, rules)
    walk.visit(0, tuple((i, 0) for i in range(len(rules))))
    return Enumeration(
        valid=_table(space, walk.valid, cluster.world_size),
        total=walk.below[0],
        removed=dict(walk.removed),
    )


_Pending = tuple[tuple[int, int], ...]
"""The rules not decided yet, each as (its index, the depth at which it is asked again)."""
_Answers = list[tuple[Callable[[dict[str, Any]], Any], frozenset[str], dict[Any, bool]]]
"""A rule's answers, by the knobs it read and their values."""


class _Walk:
    """The depth-first walk of a space under its rules: one config that each node sets its
    knob on, the blocks of valid configs found (`valid`, in walk order) and how many configs
    each rule removed."""

    def __init__(
        self, space: SearchSpace, workload: Workload, cluster: Cluster, rules: Sequence[Rule]
    ) -> None:
        self.workload, self.cluster, self.rules = workload, cluster, rules
        self.names = names = list(space.values)
        self.options = options = [space.values[n] for n in names]
        depths = range(len(names) + 1)
        self.below = [math.prod(len(o) for o in options[depth:]) for depth in depths]
        self.world = cluster.world_size
        self.valid: list[_Entry] = []
        """Blocks of valid configs, in walk order."""
        self.removed: Counter[str] = Counter()
        self.unset_below = [set(names[depth:]) for depth in depths]
        for unset in self.unset_below:
            if unset & {"tp", "pp", "cp"}:
                unset.add("dp")  # derived from them
        self.set_at = {name: depth + 1 for depth, name in enumerate(names)}
        """The depth of the walk from which a knob is set."""
        self.set_above = [_values_of(names[:depth], ordered=True) for depth in depths]
        self.fixed_above = [_fixed_by(names[:depth]) for depth in depths]
        # One config walks the tree: a node sets its knob, the rest stay at their defaults.
        self.config = _Reading.of({})
        self.knobs = object.__getattribute__(self.config, "__dict__")
        self.read = self.knobs["_read"]
        self.answers: list[_Answers] = [[] for _ in rules]
        """Per rule, the answers it gave, by the knobs it read and their values: a rule is a
        pure function of what it reads, so the same values give the same answer and reads."""
        self.subtrees: dict[
            tuple[int, _Pending], list[tuple[Callable[[dict[str, Any]], Any], dict[Any, _Subtree]]]
        ] = {}
        """Per depth and pending rules, the subtrees found, by the values of the knobs set
        above that they depend on (`_Subtree.depends_on`)."""

    def wakes(self, unread: AbstractSet[str], unset: set[str]) -> int:
        """The depth at which the first of these unset knobs is set (dp: when an unset tp,
        pp or cp is): a rule, a pure function of the knobs it read, answers the same until
        then."""
        if "dp" in unread:
            unread = (unread - {"dp"}) | ({"tp", "pp", "cp"} & unset)
        return min(self.set_at[name] for name in unread)

    def answer(self, i: int) -> tuple[bool, frozenset[str]]:
        """Rule i's answer for the config as it stands, and the knobs it read: remembered,
        or asked and remembered."""
        knobs = self.knobs
        for values_of, reads, seen in self.answers[i]:
            ok = seen.get(values_of(knobs))
            if ok is not None:
                return ok, reads
        self.read.clear()
        ok = self.rules[i].ok(self.config, self.workload, self.cluster)
        reads = frozenset(self.read)
        for values_of, known, seen in self.answers[i]:
            if known == reads:
                seen[values_of(knobs)] = ok
                break
        else:
            values_of = _values_of(reads)
            self.answers[i].append((values_of, reads, {values_of(knobs): ok}))
        return ok, reads

    def visit(self, depth: int, pending: _Pending) -> set[str]:
        """Walk the subtree; the knobs its rules read (which it depends on)."""
        knobs = self.knobs
        knobs["dp"] = max(1, self.world // (knobs["tp"] * knobs["pp"] * knobs["cp"]))
        still, read_here = self._rules_left(depth, pending)
        if still is None:
            return read_here
        if not still:  # every completion is valid
            self.valid.append((depth, self.set_above[depth](knobs), None))
            return read_here
        key = (depth, still)
        known = self._known_subtree(key)
        if known is not None:
            self.valid.append((depth, self.set_above[depth](knobs), known))
            self.removed.update(known.removed)
            return read_here | known.depends_on
        return read_here | self._walk_below(depth, still)

    def _rules_left(self, depth: int, pending: _Pending) -> tuple[_Pending | None, set[str]]:
        """The rules still undecided below this node (None when one is broken here: its
        subtree is counted as removed), and the knobs the rules asked here read."""
        unset = self.unset_below[depth]
        read_here: set[str] = set()
        still: list[tuple[int, int]] = []
        for i, wake in pending:
            if wake > depth:  # nothing it read has been set since it last answered
                still.append((i, wake))
                continue
            ok, reads = self.answer(i)
            read_here |= reads
            if reads & unset:  # it read a knob not set yet: decided further down
                still.append((i, self.wakes(reads & unset, unset)))
            elif not ok:
                self.removed[self.rules[i].name] += self.below[depth]
                return None, read_here
        return tuple(still), read_here

    def _known_subtree(self, key: tuple[int, _Pending]) -> _Subtree | None:
        """A subtree found before that stands for this node's, if any."""
        for values_of, by_values in self.subtrees.get(key, ()):
            known = by_values.get(values_of(self.knobs))
            if known is not None:
                return known
        return None

    def _walk_below(self, depth: int, still: _Pending) -> set[str]:
        """Walk each value of this depth's knob, keep what was found as one subtree block and
        remember it; the knobs the subtree's rules read."""
        knobs, valid = self.knobs, self.valid
        start, removed_before = len(valid), self.removed.copy()
        read_below: set[str] = set()
        name = self.names[depth]
        for value in self.options[depth]:
            knobs[name] = value
            read_below |= self.visit(depth + 1, still)
        knobs[name] = _DEFAULTS[name]
        subtree = _Subtree(
            entries=[(d - depth, values[depth:], s) for d, values, s in valid[start:]],
            removed=self.removed - removed_before,
            depends_on=self.fixed_above[depth](read_below),
        )
        del valid[start:]
        valid.append((depth, self.set_above[depth](knobs), subtree))
        self._remember((depth, still), subtree)
        return read_below

    def _remember(self, key: tuple[int, _Pending], subtree: _Subtree) -> None:
        """Keep the subtree for the nodes with these pending rules and the same values of
        the knobs it depends on."""
        values_of = _values_of(subtree.depends_on)
        known_by = self.subtrees.setdefault(key, [])
        found: dict[Any, _Subtree] | None = next(
            (f for reader, f in known_by if reader is values_of), None
        )
        if found is None:
            found = {}
            known_by.append((values_of, found))
        found[values_of(self.knobs)] = subtree


def _table(space: SearchSpace, valid: list[_Entry], world: int) -> ConfigTable:
    """The configs of the walk's blocks as a table: each knob's places among its options
    expanded by numpy, then the values; the knobs the space leaves out at their defaults."""
    names = list(space.values)
    options = [space.values[n] for n in names]
    code_of = [{value: code for code, value in enumerate(o)} for o in options]
    codes = _columns(names, [len(o) for o in options], valid, code_of, {})
    rows = len(codes[names[0]]) if names else len(valid)  # no knobs: the default config
    columns = {}
    for name, kind in DTYPES.items():
        dtype = None if kind is str else kind
        if name in codes:
            columns[name] = np.array(space.values[name], dtype=dtype)[codes[name]]
        else:
            columns[name] = np.full(rows, getattr(DEFAULT, name), dtype=dtype)
    columns["dp"] = np.maximum(1, world // (columns["tp"] * columns["pp"] * columns["cp"]))
    return ConfigTable(**columns)


def _fixed_by(above: Sequence[str]) -> Callable[[set[str]], frozenset[str]]:
    """Of the knobs a subtree's rules read, those set above it (dp: the tp, pp and cp set
    above, which it is derived from)."""
    names = frozenset(above)
    parallel = names & {"tp", "pp", "cp"}

    def fixed(reads: set[str]) -> frozenset[str]:
        if "dp" in reads:
            return (names & reads) | parallel
        return names & reads

    return fixed


def _values_of(
    names: Sequence[str] | frozenset[str], ordered: bool = False
) -> Callable[[dict[str, Any]], Any]:
    """A fast reader of these knobs' values from a config's fields: a tuple (`ordered`: in
    the order given), or a hashable stand-in for one. Readers are shared, one per set of
    names, so two are the same reader exactly when they read the same knobs."""
    return _reader(tuple(names) if ordered else frozenset(names), ordered)


@functools.cache
def _reader(
    names: tuple[str, ...] | frozenset[str], ordered: bool
) -> Callable[[dict[str, Any]], Any]:
    if not names:
        return lambda _: ()
    if len(names) == 1 and not ordered:
        return operator.itemgetter(*names)
    getter = operator.itemgetter(*names)
    if len(names) == 1:
        return lambda knobs: (getter(knobs),)
    return getter


def _columns(
    names: Sequence[str],
    sizes: Sequence[int],
    entries: list[_Entry],
    code_of: Sequence[dict[Any, int]],
    made: dict[_Subtree, dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """The configs of these blocks as columns of these knobs, each value as its place among
    the knob's options (`sizes` of them), in walk order: the blocks that end at one depth in
    one way at once, each the values set above repeated over what lies below (every
    completion, or a subtree's configs, worked out once per subtree)."""
    groups: dict[tuple[int, _Subtree | None], list[int]] = {}
    for i, (depth, _, subtree) in enumerate(entries):
        groups.setdefault((depth, subtree), []).append(i)
    parts: list[dict[str, np.ndarray]] = []
    order: list[np.ndarray] = []
    for (depth, subtree), which in groups.items():
        if subtree is None:
            inner = _product(names[depth:], sizes[depth:])
        elif subtree in made:
            inner = made[subtree]
        else:
            inner = made[subtree] = _columns(
                names[depth:], sizes[depth:], subtree.entries, code_of[depth:], made
            )
        size = len(inner[names[depth]]) if depth < len(names) else 1
        above = zip(*(entries[i][1] for i in which), strict=True)
        columns: dict[str, np.ndarray] = {}
        for name, codes, set_above in zip(names[:depth], code_of, above, strict=False):
            set_codes = np.fromiter(map(codes.__getitem__, set_above), np.int16, len(which))
            columns[name] = np.repeat(set_codes, size)
        for name, block in inner.items():
            columns[name] = np.tile(block, len(which))
        parts.append(columns)
        order.append(np.repeat(np.array(which), size))
    if not parts:
        return {name: np.array([], dtype=np.int16) for name in names}
    joined = {name: np.concatenate([p[name] for p in parts]) for name in names}
    if len(parts) < 2:
        return joined
    rows = np.argsort(np.concatenate(order), kind="stable")
    return {name: column[rows] for name, column in joined.items()}


def _product(names: Sequence[str], sizes: Sequence[int]) -> dict[str, np.ndarray]:
    """Every combination of these knobs' options (as places), the first varying slowest."""
    total = math.prod(sizes)
    columns = {}
    inner = total
    for name, size in zip(names, sizes, strict=True):
        inner //= size
        block = np.repeat(np.arange(size, dtype=np.int16), inner)
        columns[name] = np.tile(block, total // len(block))
    return columns


DEFAULT = TrainConfig()
_DEFAULTS = vars(DEFAULT)


def _model_parallel(values: dict[str, Any]) -> int:
    return int(values.get("tp", 1)) * int(values.get("pp", 1)) * int(values.get("cp", 1))
