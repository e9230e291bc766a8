"""Loss parity: whether a config trains the same model as the user's own config.

Every trial of a user's command records the loss of each optimizer step from the first
(`TrialResult.losses`), from the same seed and data. A config's curve is compared with the
user's config's (the study's first trial) over the steps both ran: the largest relative
difference at any step. It must stay within the run-to-run floor: `REPEAT_MARGIN` times the
largest difference between runs of the user's config (its repeats), and never less than
`PRECISION_FLOOR`, since on one machine with one seed those runs are often bit-identical
while a legitimate change is not (summation order; a micro-batch change regroups dropout's
random draws, which moves the tiny test scripts' fp32 losses by up to 0.2% a step). A config
over the floor `differs`: its trial fails with that kind, so it is never exported as the best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.space import TrainConfig
from autotune.study.trial_attrs import USERS_CONFIG, TrialAttrs
from autotune.units import knob_text

DIFFERS = "differs"
"""The kind of a trial whose loss curve leaves the user's config's: it trains another model."""
PRECISION_FLOOR = {"fp32": 0.005, "bf16": 0.02, "fp16": 0.02}
"""The least relative loss difference that counts, by the job's precision: 0.5% in fp32
(3x the largest step difference, 0.16%, a legitimate micro-batch change made in
results/bench/parity.md); half-precision rounding (bf16 keeps 8 bits) adds 1.5%."""
REPEAT_MARGIN = 2.0
"""The floor over the largest difference measured between runs of the user's config."""


@dataclass(frozen=True)
class Parity:
    """One config's curve against the user's config's."""

    verdict: str
    """same, or differs."""
    steps: int
    """Steps compared: those both curves have, from the first."""
    largest: float
    """The largest relative difference at any compared step."""
    at_step: int
    floor: float
    floor_from: str
    """What set the floor: repeats (of the user's config), or precision."""

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


def largest_difference(curve: tuple[float, ...], base: tuple[float, ...]) -> tuple[float, int]:
    """The largest relative difference over the steps both curves have, and its step (from
    1); (0, 0) when they share none."""
    steps = zip(curve, base, strict=False)  # the steps both ran
    pairs = [(_step_difference(c, b), i + 1) for i, (c, b) in enumerate(steps)]
    return max(pairs, default=(0.0, 0))


def _step_difference(loss: float, base: float) -> float:
    """Relative difference at one step; infinite where one loss is not finite and the other
    is not the same (a NaN or inf loss never passes for the same model)."""
    if math.isfinite(loss) and math.isfinite(base):
        return abs(loss - base) / max(abs(base), 1e-12)
    same = (math.isnan(loss) and math.isnan(base)) or loss == base
    return 0.0 if same else math.inf


def run_floor(bases: list[tuple[float, ...]], precision: str) -> tuple[float, str]:
    """The floor and what set it, from the curves of the user's config's runs."""
    spreads = (largest_difference(a, b)[0] for i, a in enumerate(bases) for b in bases[i + 1 :])
    spread = max(
        (d for d in spreads if math.isfinite(d)), default=0.0
    )  # a diverged repeat sets none
    least = PRECISION_FLOOR.get(precision, PRECISION_FLOOR["bf16"])
    measured = REPEAT_MARGIN * spread
    return (measured, "repeats") if measured > least else (least, "precision")


def judge(
    curve: tuple[float, ...], bases: list[tuple[float, ...]], precision: str
) -> Parity | None:
    """`curve` against the first of the user's config's runs; None when either has no loss."""
    if not curve or not bases:
        return None
    largest, at_step = largest_difference(curve, bases[0])
    floor, floor_from = run_floor(bases, precision)
    verdict = DIFFERS if largest > floor else "same"
    return Parity(verdict, min(len(curve), len(bases[0])), largest, at_step, floor, floor_from)


def reference_runs(study: optuna.Study) -> list[FrozenTrial]:
    """The completed runs, with their loss, of the config every other is compared with: the
    user's own (`USERS_CONFIG`), or where autotune cannot know it (a script of the
    `autotune.step` helper) the study's first completed trial's; first first."""
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if TrialAttrs.of(t).losses
    ]
    first = TrialAttrs.of(done[0]).config_key if done else None
    key = study.user_attrs.get(USERS_CONFIG) or first
    return [t for t in done if TrialAttrs.of(t).config_key == key]


def reference_name(study: optuna.Study) -> str:
    return "your config" if study.user_attrs.get(USERS_CONFIG) else "the first trial's config"


def of_trial(
    study: optuna.Study, number: int, curve: tuple[float, ...], precision: str
) -> Parity | None:
    """Trial `number`'s parity (its curve `curve`) with the reference config as the study
    knows it now."""
    runs = reference_runs(study)
    if any(t.number == number for t in runs):  # the reference itself
        bases = [TrialAttrs.of(t).losses for t in runs]
        floor, floor_from = run_floor(bases, precision)
        return Parity("same", len(curve), 0.0, 0, floor, floor_from) if curve else None
    return judge(curve, [TrialAttrs.of(t).losses for t in runs], precision)


def changed_knobs(config: TrainConfig, reference: TrainConfig) -> str:
    """The knobs a config sets otherwise than the reference, e.g. `mbs 8->4`."""
    mine, theirs = config.as_dict(), reference.as_dict()
    names = [k for k in mine if mine[k] != theirs.get(k)]
    return (
        ", ".join(f"{k} {knob_text(k, theirs.get(k))}->{knob_text(k, mine[k])}" for k in names)
        or "none"
    )


def differs_note(parity: Parity, knobs: str, reference: str) -> str:
    """A differing trial's error: which knobs changed the training, and by how much."""
    return (
        f"trains another model than {reference}: {knobs} moves the loss "
        f"{_pct(parity.largest)} at step {parity.at_step} of {parity.steps} "
        f"(floor {_pct(parity.floor)}, from {parity.floor_from})"
    )


def _pct(share: float) -> str:
    if share < 0.0001:
        return "0%" if share == 0 else "<0.01%"
    return f"{100 * share:.2g}%" if share < 0.01 else f"{100 * share:.1f}%"


def summary_line(study: optuna.Study) -> str | None:
    """The summary's `parity:` line; None for a study with no loss to compare (not a user's
    command, or one that tells no loss)."""
    from autotune.study.confirm import standings
    from autotune.study.storage import stored_specs

    runs = reference_runs(study)
    if not runs:
        return None
    ranked = standings(study)
    best = ranked[0].trial if ranked else runs[0]
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    differing = [t for t in failed if TrialAttrs.of(t).kind == DIFFERS]
    note = ""
    if differing:
        first = differing[0]
        note = f"; {len(differing)} trial(s) differ, e.g. trial {first.number}: "
        note += str(TrialAttrs.of(first).error)
    precision = stored_specs(study)[1].precision
    parity = of_trial(study, best.number, TrialAttrs.of(best).losses, precision)
    if parity is None:
        return f"parity: not checked for the best (it told no loss){note}"
    if best.number in {t.number for t in runs}:
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        alone = len(complete) == len(runs) and differing
        why = "no other config trains the same model" if alone else "the fastest"
        return f"parity: {reference_name(study)} is exported ({why}){note}"
    return (
        f"parity: same: the loss stays within {_pct(parity.largest)} of "
        f"{reference_name(study)}'s over {parity.steps} steps (floor {_pct(parity.floor)}, "
        f"from {parity.floor_from}){note}"
    )
