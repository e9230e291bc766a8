"""Loss parity: whether a config trains the same model as the user's own config.

Every trial of a user's command records the loss of each optimizer step from the first
(`TrialResult.losses`), from the same seed and data. The reference is the user's own config,
always (`study/verdict/reference.py`): it runs first, and once more with torch's generators
reseeded after its first optimizer step, so that its dropout and any later draw come out otherwise.
How far those runs drift apart, step by step, is what a change that keeps the training does
(a micro-batch regroups dropout's draws; another ZeRO stage or bucket sums in another order):
the parts stay close until the training's own chaos amplifies the difference.

A config's curve is compared with the user's seeded-alike run at every step both ran. Each
step has a floor: `MARGIN` times the largest drift of the user's runs up to that step, and
never less than `PRECISION_FLOOR` (rounding). A config over the floor at any step `differs`:
it trains another model, its trial fails with that kind, and it is never exported. A learning
rate, data order or global batch that follows a knob moves the loss within the first steps,
before the drift grows; a safe change stays within the drift however long the trials run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study.record.trial_attrs import PARITY_RESEED, USERS_CONFIG, TrialAttrs
from autotune.trial.spec import ParityPlan, relative_difference

DIFFERS = "differs"
"""The kind of a trial whose loss curve leaves the user's config's: it trains another model."""
PRECISION_FLOOR = {"fp32": 0.005, "bf16": 0.02, "fp16": 0.02}
"""The least relative loss difference that counts, by the job's precision: 0.5% in fp32, where
the user's runs without dropout are often bit-identical while a safe change is not (another
summation order: 0.16% at most a step on the test scripts, results/bench/parity.md); half
precision's rounding (bf16 keeps 8 bits) adds 1.5%."""
LEAST_LOSS = 0.1
"""A difference is relative to the loss at its step, or to this share of the first step's
loss where the loss has fallen below it: a script that learns one batch by heart drives its
loss to 0, and there any two runs differ by many times their loss."""
MARGIN = 3.0
"""A step's floor over the largest drift between the user's runs up to that step: the drift
of one reseeded run is one draw of what a safe change does, and another draw lands up to a
few times further at a step (results/bench/parity.md)."""


@dataclass(frozen=True)
class Run:
    """One run of the user's config: its loss curve, and whether it was reseeded."""

    curve: tuple[float, ...]
    reseeded: bool


@dataclass(frozen=True)
class Band:
    """What the user's own runs say a change that keeps the training may do to the loss."""

    curve: tuple[float, ...]
    """The user's config's loss per step, from its longest run seeded as every trial is."""
    floor: tuple[float, ...]
    """The largest relative difference from `curve` that is the same training, per step:
    over the steps the user's runs cover (two of them where there are two)."""
    from_runs: tuple[bool, ...]
    """Per step, whether the floor is the runs' drift (else the precision floor)."""
    runs: int
    reseeded: int
    """How many of the runs were reseeded (0: the floor is the precision floor alone)."""

    @property
    def least(self) -> float:
        """The least loss a difference is relative to (`LEAST_LOSS`)."""
        return LEAST_LOSS * abs(self.curve[0]) if math.isfinite(self.curve[0]) else 0.0

    def plan(self) -> ParityPlan:
        """What a trial is given, to stop once its loss leaves the user's."""
        reference = self.curve[: len(self.floor)]
        return ParityPlan(reference=reference, floor=self.floor, least=self.least)

    def source(self, step: int) -> str:
        """What set the floor at `step` (from 1), in words."""
        if step and self.from_runs[step - 1]:
            return f"the drift of your config's {self.runs} runs"
        return "precision"


@dataclass(frozen=True)
class Parity:
    """One config's curve against the user's config's."""

    verdict: str
    """same, or differs."""
    steps: int
    """Steps compared: those both curves have (and the user's runs cover), from the first."""
    largest: float
    """The relative difference at the step nearest its floor (or furthest over it)."""
    at_step: int
    floor: float
    """That step's floor."""
    floor_from: str

    def as_dict(self) -> dict[str, Any]:
        """best.yaml's `parity:` block."""
        return {
            "verdict": self.verdict,
            "steps_compared": self.steps,
            "largest_difference": round(self.largest, 6),
            "at_step": self.at_step,
            "floor": round(self.floor, 6),
            "floor_from": self.floor_from,
        }


def band(runs: Sequence[Run], precision: str) -> Band | None:
    """The band of the user's runs; None without a seeded-alike run with a loss."""
    alike = [r for r in runs if not r.reseeded and r.curve]
    if not alike:
        return None
    base = max(alike, key=lambda r: len(r.curve)).curve
    curves = [r.curve for r in runs if r.curve]
    lengths = sorted((len(c) for c in curves), reverse=True)
    covered = min(len(base), lengths[1]) if len(curves) > 1 else len(base)
    least = PRECISION_FLOOR.get(precision, PRECISION_FLOOR["bf16"])
    scale = LEAST_LOSS * abs(base[0]) if math.isfinite(base[0]) else 0.0
    floor, from_runs, widest = [], [], 0.0
    for step in range(covered):
        drifts = (
            relative_difference(a[step], b[step], scale)
            for i, a in enumerate(curves)
            for b in curves[i + 1 :]
            if step < min(len(a), len(b))
        )
        # a run that diverged (NaN, inf) sets no floor: it is not what a safe change does
        widest = max([widest, *(d for d in drifts if math.isfinite(d))])
        floor.append(max(least, MARGIN * widest))
        from_runs.append(MARGIN * widest > least)
    reseeded = sum(r.reseeded for r in runs if r.curve)
    return Band(base, tuple(floor), tuple(from_runs), len(curves), reseeded)


def judge(curve: tuple[float, ...], against: Band) -> Parity | None:
    """`curve` against the band of the user's runs; None when it has no step to compare."""
    steps = min(len(curve), len(against.floor))
    if not steps:
        return None
    least = against.least
    ratios = [
        (relative_difference(curve[i], against.curve[i], least) / against.floor[i], i)
        for i in range(steps)
    ]
    ratio, i = max(ratios)
    largest = relative_difference(curve[i], against.curve[i], least)
    verdict = DIFFERS if ratio > 1 else "same"
    return Parity(verdict, steps, largest, i + 1, against.floor[i], against.source(i + 1))


def reference_runs(study: optuna.Study) -> list[FrozenTrial]:
    """The completed runs of the user's own config (`USERS_CONFIG`), first first; none where
    the study does not know it."""
    key = study.user_attrs.get(USERS_CONFIG)
    if key is None:
        return []
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [t for t in done if TrialAttrs.of(t).config_key == key]


def study_band(study: optuna.Study, precision: str) -> Band | None:
    """The band of the user's runs as the study knows them now."""
    runs = [
        Run(TrialAttrs.of(t).losses, PARITY_RESEED in t.user_attrs) for t in reference_runs(study)
    ]
    return band(runs, precision)


def of_trial(
    study: optuna.Study, number: int, curve: tuple[float, ...], precision: str
) -> Parity | None:
    """Trial `number`'s parity (its curve `curve`) with the user's config as the study knows
    it now; None where there is nothing to compare (no reference, or no loss)."""
    against = study_band(study, precision)
    if against is None or not curve:
        return None
    if any(t.number == number for t in reference_runs(study)):  # the reference itself
        steps = min(len(curve), len(against.floor))
        return Parity("same", steps, 0.0, 0, against.floor[0], against.source(1))
    return judge(curve, against)


def differing_now(study: optuna.Study) -> set[int]:
    """Completed trials whose loss leaves the user's band as the study knows it now: a config
    measured before its reference existed (a study begun by an older version, a reference
    run again on resume) is judged as any other."""
    precision = str((study.user_attrs.get("workload") or {}).get("precision", "bf16"))
    against = study_band(study, precision)
    if against is None:
        return set()
    mine = {t.number for t in reference_runs(study)}
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return {
        t.number
        for t in done
        if t.number not in mine
        and (found := judge(TrialAttrs.of(t).losses, against)) is not None
        and found.verdict == DIFFERS
    }


def longest_run(trials: Sequence[FrozenTrial]) -> FrozenTrial | None:
    """Of a config's completed runs, the one with the longest loss curve (the latest of
    equals): the one its parity is stated on."""
    told = [t for t in trials if TrialAttrs.of(t).losses]
    return max(told, key=lambda t: (len(TrialAttrs.of(t).losses), t.number), default=None)


def pct(share: float) -> str:
    """A relative difference in words: 0%, <0.01%, 0.16%, 4.7%."""
    if share < 0.0001:
        return "0%" if share == 0 else "<0.01%"
    return f"{100 * share:.2g}%" if share < 0.01 else f"{100 * share:.1f}%"
