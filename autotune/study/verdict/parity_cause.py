"""Which move away from the user's config breaks loss parity, and what the search leaves alone.

A move is a knob set otherwise than in the user's config (`dp` follows the others and is no
move of its own). A flagged trial (its loss `differs`, or its script ran another config than
it was given: `config_ignored`) suspects every move it made that no trial of the same
training made too; a knob moved by a trial judged the same over the user's whole band is
cleared (a short trial's verdict is no proof: a learning rate that follows a knob can take
tens of steps to show). A flagged trial with one suspect convicts it; one with several, none
of them convicted, stays unexplained until a one-knob trial (the user's config with that one
move: `next_one_knob`, as long as the user's runs) convicts or clears its likeliest suspect.
The search then holds each convicted knob, and every suspect of an unexplained trial, at the
user's value (`allows`).

Failures name moves too: the same failure (its message with numbers and paths aside) in two
or more trials bans the knob values they all share that no completed trial had: a script that
cannot run at micro-batch 16 is not asked to again, whatever else moves.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.space import TrainConfig
from autotune.space.table import ConfigTable
from autotune.study.record.trial_attrs import ONE_KNOB, USERS_CONFIG, TrialAttrs
from autotune.study.verdict.parity import DIFFERS, Parity, pct, study_band
from autotune.units import knob_text

FLAGGED = (DIFFERS, "config_ignored")
"""The outcomes of a config that does not train the user's model."""
REPEATED_FAILURES = ("crash", "launch_error", "comm_error")
"""Failures that name a move when they repeat alike across configs that share it (out of
memory has the memory model; a script fault stops the study)."""
ALIKE = 2
"""Failures with the same message that ban the knob value they share."""
KEPT_AFTER_FLAG = 3
"""Trials at the held values after the first flagged one before the stop rule may end the
search: what the model learnt before leant on the moves now held."""
KNOB_NAMES = {
    "mbs": "the micro-batch",
    "zero": "the ZeRO stage",
    "tp": "the tensor-parallel degree",
    "pp": "the pipeline-parallel degree",
    "vpp": "the virtual pipeline stages",
    "cp": "the context-parallel degree",
    "ep": "the expert-parallel degree",
    "recompute": "recomputation",
    "offload_optimizer": "the optimizer offload",
    "offload_param": "the parameter offload",
    "reduce_bucket": "the reduce bucket",
    "allgather_bucket": "the all-gather bucket",
    "overlap_comm": "overlapping communication",
}
WHY = {
    DIFFERS: "the loss moves with it",
    "config_ignored": "your script runs another config than it is given when it moves",
}
WHY_MBS = {
    DIFFERS: "your script's learning rate, data or global batch follow it",
    "config_ignored": "your script sets its own global batch from it, so DeepSpeed's is not "
    "the trial's",
}


def moves(config: TrainConfig, users: TrainConfig) -> dict[str, Any]:
    """The knobs `config` sets otherwise than `users`, with its values (`dp` aside)."""
    mine, theirs = config.as_dict(), users.as_dict()
    return {k: v for k, v in mine.items() if k != "dp" and v != theirs.get(k)}


def moves_text(config: TrainConfig, users: TrainConfig) -> str:
    """The moves of `config` from the user's config in words, e.g. `mbs 8->4, zero 1->3`."""
    theirs = users.as_dict()
    return (
        ", ".join(
            f"{k} {knob_text(k, theirs[k])}->{knob_text(k, v)}"
            for k, v in moves(config, users).items()
        )
        or "none"
    )


def differs_note(found: Parity, moved: str) -> str:
    """A differing trial's error: its moves, and where its loss left the user's."""
    return (
        f"trains another model than your config: with {moved} the loss moves {pct(found.largest)}"
        f" at step {found.at_step} of {found.steps} (floor {pct(found.floor)} there, from "
        f"{found.floor_from})"
    )


@dataclass(frozen=True)
class Flagged:
    """A trial that does not train the user's model, and the moves it is suspected for."""

    number: int
    kind: str
    moved: dict[str, Any]
    suspects: frozenset[str]


@dataclass(frozen=True)
class Banned:
    """Knob values whose trials fail alike: no config with all of them is proposed again."""

    values: dict[str, Any]
    error: str
    trials: tuple[int, ...]

    def matches(self, config: TrainConfig) -> bool:
        return all(getattr(config, k) == v for k, v in self.values.items())

    @property
    def text(self) -> str:
        return ",".join(f"{k}={knob_text(k, v)}" for k, v in self.values.items())


@dataclass(frozen=True)
class Causes:
    """What the study's trials say breaks parity, and what the search holds for it."""

    users: TrainConfig
    flagged: tuple[Flagged, ...]
    convicted: dict[str, tuple[int, ...]]
    """Knob -> the flagged trials it explains."""
    cleared: frozenset[str]
    """Knobs a trial of the same training moved."""
    tested: frozenset[tuple[str, Any]]
    """(knob, value) pairs a one-knob trial moved."""
    banned: tuple[Banned, ...]
    kept_after: int = 0
    """Configs measured after the first flagged trial that move knobs of the user's and keep
    the held ones (repeats and the user's own aside)."""

    def wants_more(self) -> bool:
        """Whether the search should go on past its stop rule: a move is held and too few
        configs that keep it were measured since (`KEPT_AFTER_FLAG`)."""
        return bool(self.held()) and self.kept_after < KEPT_AFTER_FLAG

    @property
    def unexplained(self) -> list[Flagged]:
        """Flagged trials none of whose suspects is convicted."""
        return [f for f in self.flagged if not f.suspects & set(self.convicted)]

    def held(self) -> dict[str, Any]:
        """Knob -> the user's value it is held at: convicted knobs, and every suspect of an
        unexplained trial (every move of one whose moves were each cleared alone)."""
        knobs = set(self.convicted)
        for f in self.unexplained:
            knobs |= f.suspects or set(f.moved)
        return {k: getattr(self.users, k) for k in sorted(knobs)}

    def convicted_moves(self, config: TrainConfig) -> bool:
        """Whether `config` moves a knob a flagged trial convicted: it changes the training
        however short a run of it looked the same."""
        return any(getattr(config, k) != getattr(self.users, k) for k in self.convicted)

    def allows(self, config: TrainConfig) -> bool:
        """Whether the search may propose `config`: no held knob moved, no banned value."""
        held = self.held()
        if any(getattr(config, k) != v for k, v in held.items()):
            return False
        return not any(b.matches(config) for b in self.banned)

    def why_not(self, config: TrainConfig) -> str | None:
        """Why `config` is not proposed, in words; None where it may be."""
        for knob, value in self.held().items():
            if getattr(config, knob) != value:
                named = ", ".join(map(str, self._trials_of(knob)))
                return (
                    f"moves {knob} off your {knob_text(knob, value)}, which changes the "
                    f"training (trial {named})"
                )
        for b in self.banned:
            if b.matches(config):
                listed = ", ".join(map(str, b.trials))
                return f"{b.text} failed alike in trials {listed}: {b.error}"
        return None

    def _trials_of(self, knob: str) -> tuple[int, ...]:
        return self.convicted.get(knob) or tuple(
            f.number for f in self.unexplained if knob in (f.suspects or set(f.moved))
        )

    def next_one_knob(self) -> tuple[str, Any] | None:
        """The one-knob trial that tells the next unexplained trial's cause: its likeliest
        suspect (the one most unexplained trials share), at that trial's value; None when
        every unexplained trial has one suspect or its suspects were each tried alone."""
        unexplained = [f for f in self.unexplained if len(f.suspects) > 1]
        counts = Counter(k for f in unexplained for k in f.suspects)
        for f in unexplained:
            untried = [k for k in f.suspects if (k, f.moved[k]) not in self.tested]
            if untried:
                knob = max(untried, key=lambda k: (counts[k], k == "mbs", k))
                return knob, f.moved[knob]
        return None

    def named(self) -> str | None:
        """The cause in words, for the summary, best.yaml and the report; None where no
        trial was flagged."""
        if not self.flagged:
            return None
        parts = [self._convicted_text(k, trials) for k, trials in self.convicted.items()]
        if open_ := self.unexplained:
            knobs = sorted({k for f in open_ for k in (f.suspects or f.moved)})
            numbers = ", ".join(str(f.number) for f in open_)
            parts.append(
                f"not yet known which of {', '.join(knobs)} changes the training "
                f"(trials {numbers})"
            )
        return "; ".join(parts)

    def _convicted_text(self, knob: str, trials: tuple[int, ...]) -> str:
        by_number = {f.number: f for f in self.flagged}
        kinds = Counter(by_number[n].kind for n in trials)
        kind = kinds.most_common(1)[0][0]
        why = (WHY_MBS if knob == "mbs" else WHY)[kind]
        user = knob_text(knob, getattr(self.users, knob))
        values = sorted({knob_text(knob, by_number[n].moved[knob]) for n in trials})
        steps = ", ".join(f"{user}->{v}" for v in values)
        name = KNOB_NAMES.get(knob, knob)
        listed = ", ".join(map(str, trials))
        return f"{name} ({knob} {steps}): {why} (trial{'s' if len(trials) > 1 else ''} {listed})"


def allowed_rows(table: ConfigTable, causes: Causes) -> np.ndarray | None:
    """Per config of `table`, whether `causes` allow it (`Causes.allows`, over every row at
    once); None where all are."""
    mask = np.ones(len(table), dtype=bool)
    for knob, value in causes.held().items():
        mask &= getattr(table, knob) == value
    for banned in causes.banned:
        matched = np.ones(len(table), dtype=bool)
        for knob, value in banned.values.items():
            matched &= getattr(table, knob) == value
        mask &= ~matched
    return None if mask.all() else mask


def read_causes(study: optuna.Study) -> Causes | None:
    """The causes as the study's trials tell them now; None where the study does not know
    the user's config."""
    key = study.user_attrs.get(USERS_CONFIG)
    if key is None:
        return None
    trials = study.get_trials(deepcopy=False)
    ran = [t for t in trials if TrialAttrs.of(t).config_values is not None]
    users = next(
        (TrialAttrs.of(t).config for t in ran if TrialAttrs.of(t).config_key == key), None
    )
    if users is None:
        return None
    cleared = _cleared(study, ran, users, key)
    flagged = _flagged(ran, users, cleared)
    causes = Causes(
        users=users,
        flagged=tuple(flagged),
        convicted=_convicted(flagged),
        cleared=cleared,
        tested=frozenset(
            (str(t.user_attrs[ONE_KNOB]), TrialAttrs.of(t).config_values[t.user_attrs[ONE_KNOB]])  # type: ignore[index]
            for t in ran
            if t.user_attrs.get(ONE_KNOB) in (TrialAttrs.of(t).config_values or {})
        ),
        banned=_banned(ran, users),
    )
    if not flagged:
        return causes
    first = min(f.number for f in flagged)
    kept = {
        TrialAttrs.of(t).config_key
        for t in ran
        if t.number > first
        and TrialAttrs.of(t).confirms is None
        and moves(TrialAttrs.of(t).config, users)
        and causes.allows(TrialAttrs.of(t).config)
    }
    return dataclasses.replace(causes, kept_after=len(kept))


def _cleared(
    study: optuna.Study, ran: list[FrozenTrial], users: TrainConfig, key: str
) -> frozenset[str]:
    """Knobs moved by a trial judged the same over the whole band (a short run is no
    proof)."""
    precision = str((study.user_attrs.get("workload") or {}).get("precision", "bf16"))
    against = study_band(study, precision)
    whole = max(1, len(against.floor) if against is not None else 0)
    return frozenset(
        k
        for t in ran
        if t.state == TrialState.COMPLETE
        and len(TrialAttrs.of(t).losses) >= whole
        and TrialAttrs.of(t).config_key != key
        for k in moves(TrialAttrs.of(t).config, users)
    )


def _flagged(ran: list[FrozenTrial], users: TrainConfig, cleared: frozenset[str]) -> list[Flagged]:
    """The trials that do not train the user's model, each with its suspects (its moves no
    same-training trial cleared); the user's own config failing so is a script fault."""
    found = []
    for t in ran:
        attrs = TrialAttrs.of(t)
        if t.state != TrialState.FAIL or attrs.kind not in FLAGGED:
            continue
        moved = moves(attrs.config, users)
        if moved:
            found.append(Flagged(t.number, str(attrs.kind), moved, frozenset(moved) - cleared))
    return found


def _convicted(flagged: list[Flagged]) -> dict[str, tuple[int, ...]]:
    """Knobs a flagged trial suspects alone, each with the flagged trials it explains (every
    one that suspects it too)."""
    convicted: dict[str, list[int]] = {}
    for f in flagged:
        if len(f.suspects) == 1:
            convicted.setdefault(next(iter(f.suspects)), []).append(f.number)
    for f in flagged:
        for knob in f.suspects & set(convicted):
            if f.number not in convicted[knob]:
                convicted[knob].append(f.number)
    return {k: tuple(sorted(v)) for k, v in convicted.items()}


def _banned(ran: list[FrozenTrial], users: TrainConfig) -> tuple[Banned, ...]:
    """For each failure that repeats alike (`ALIKE` times or more, its message's gist), the
    knob values all its trials share apart from the user's, less any a completed trial had:
    together they are what the failure needs (a third failure without one of them narrows
    it)."""
    completed = [TrialAttrs.of(t).config for t in ran if t.state == TrialState.COMPLETE]
    groups: dict[str, list[FrozenTrial]] = {}
    for t in ran:
        attrs = TrialAttrs.of(t)
        if t.state == TrialState.FAIL and attrs.kind in REPEATED_FAILURES:
            groups.setdefault(failure_gist(str(attrs.error or "")), []).append(t)
    found = []
    for gist, failed in groups.items():
        if len(failed) < ALIKE:
            continue
        shared = [moves(TrialAttrs.of(t).config, users) for t in failed]
        common = {k: v for k, v in shared[0].items() if all(m.get(k) == v for m in shared)}
        ban = Banned(dict(sorted(common.items())), gist, tuple(t.number for t in failed))
        if common and not any(ban.matches(c) for c in completed):
            found.append(ban)
    return tuple(found)


def failure_gist(error: str) -> str:
    """A failure's message with what changes between runs taken out (its numbers and paths),
    its last line: two failures with the same gist failed alike."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    line = re.sub(r"(/[\w.\-]+)+", "<path>", line)
    line = re.sub(r"0x[0-9a-fA-F]+|\d+(\.\d+)?", "#", line)
    return line[:200]
