"""Whether the best trial's NCCL settings go into the export: only where they beat the same
layout with NCCL's own choices, measured, by more than the measurement noise."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from autotune.confidence import NCCL_KEEP_ONE_SIDED_PROBABILITY
from autotune.space import nccl_default
from autotune.study.record.trial_attrs import TrialAttrs
from autotune.study.verdict.confirm import (
    Standing,
    nccl_baseline,
    on_repeats_after_choice,
    ratio_interval,
    separated,
    standings,
    unselected,
)
from autotune.study.verdict.noise import study_spread


@dataclass(frozen=True)
class NcclVerdict:
    trial: FrozenTrial
    """The trial to export."""
    note: str | None
    """What nccl.env says of the NCCL settings (None: the winner uses NCCL's defaults)."""


def nccl_verdict(study: optuna.Study, best: FrozenTrial) -> NcclVerdict:
    """Keep the winner's NCCL settings only when its repeats are faster than the same layout
    with NCCL's defaults at `NCCL_KEEP_ONE_SIDED_PROBABILITY`, between-trial noise included (the
    confirmation repeats both, interleaved, up to `Effort.repeats` times whatever they show);
    else export the best layout with NCCL's defaults. The winner's measurements that chose
    it read fast, so its repeats after its choice decide (`unchosen`)."""
    config = TrialAttrs.of(best).config
    if config == nccl_default(config):
        return NcclVerdict(best, None)
    ranked = [s for s in standings(study) if TrialAttrs.of(s.trial).config_values is not None]
    leader = next((s for s in ranked if s.trial.number == best.number), None)
    baseline = nccl_baseline(leader, ranked) if leader is not None else None
    winner, measured_on = unchosen(study, leader) if leader is not None else (None, "")
    settings = f"NCCL_ALGO={config.nccl_algo}, NCCL_PROTO={config.nccl_proto}"
    if baseline is not None and (winner is None or unselected(baseline) is None):
        why = (
            "it was not repeated against NCCL's default (no confirmation: --no-confirm, "
            "or the time or repeat budget ran out)"
        )
    elif winner is not None and baseline is not None:
        between = study_spread(study)
        # two-sided, so that its lower end is the one-sided bound
        level = 2 * NCCL_KEEP_ONE_SIDED_PROBABILITY - 1
        ratio, low, high = ratio_interval(winner, baseline, between, level)
        measured = (
            f"{ratio - 1:+.1%} over NCCL's default (trial {baseline.trial.number}; {level:.0%} "
            f"interval {low - 1:+.1%} to {high - 1:+.1%}, {len(winner.values)} "
            f"{measured_on.format(s='s' if len(winner.values) != 1 else '')} and "
            f"{len(baseline.values)} measurements)"
        )
        if separated(winner, baseline, between, NCCL_KEEP_ONE_SIDED_PROBABILITY):
            version = TrialAttrs.of(best).nccl_version or "unknown"
            return NcclVerdict(best, f"Measured gain of {settings}: {measured}, NCCL {version}.")
        why = f"{measured} is not a gain at {NCCL_KEEP_ONE_SIDED_PROBABILITY:.0%} confidence"
    else:
        why = "it was never measured against NCCL's default (or that measurement failed)"
    plain = [s for s in ranked if s.config == nccl_default(s.config)]
    fallback = plain[0].trial if plain else best
    return NcclVerdict(
        fallback,
        f"Trial {best.number}'s {settings} is not kept: {why}. Nothing is set.",
    )


def unchosen(study: optuna.Study, leader: Standing) -> tuple[Standing | None, str]:
    """The winner's measurements that took no part in choosing it, and what they are (a
    noun whose plural's `s` is left to format): its repeats after the choice where it has
    them (among NCCL variants repeated alike, the one whose repeats read fastest leads, so
    those repeats read fast too), else its repeats without the trial that made it lead
    (`confirm.unselected`)."""
    after = on_repeats_after_choice(study, leader)
    if after is not None:
        return after, "repeat{s} after its choice"
    winner = unselected(leader)
    return winner, "measurement{s}" if winner is leader else "repeat{s}"
