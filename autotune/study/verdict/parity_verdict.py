"""A study's loss-parity verdict as every output states it: what the reference is (the user's
config and where it came from, or why there is none), how the exported config's longest run
compares with it, how many trials train another model, and the move that makes them
(`parity_cause`). The summary's `parity:` lines, best.yaml's `parity:` section and the
report read it from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.study.record.trial_attrs import (
    NO_REFERENCE,
    USERS_CONFIG,
    USERS_CONFIG_FROM,
    TrialAttrs,
)
from autotune.study.verdict import parity
from autotune.study.verdict.parity_cause import FLAGGED, read_causes
from autotune.units import display_label, knob_text

NOT_CHECKED = "not_checked"
YOURS = "yours"
"""The verdict of an export that is the user's own config: it trains their model by being it."""


@dataclass(frozen=True)
class StudyParity:
    """The study's loss parity, for the config it exports."""

    verdict: str
    """same, differs, yours or not_checked."""
    why: str
    """The verdict in words."""
    found: parity.Parity | None
    """The exported config's longest run against the user's, where it was judged."""
    reference: str | None
    """The user's config and where it came from, in words; None without one."""
    runs: int
    reseeded: int
    differing: tuple[int, ...]
    """Trials that train another model (their loss differs, or the script ignored the
    config)."""
    cause: str | None
    held: dict[str, Any]

    def lines(self) -> list[str]:
        """The summary's lines."""
        lines = [f"parity: {self.why}"]
        if self.reference is not None:
            runs = f"{self.runs} run{'s' if self.runs != 1 else ''}"
            reseeded = f", {self.reseeded} reseeded" if self.reseeded else ""
            lines.append(f"  reference: {self.reference} ({runs}{reseeded})")
        if self.differing:
            lines.append(
                f"  {len(self.differing)} trial{'s' if len(self.differing) > 1 else ''} "
                f"train another model: {self.cause or 'cause unknown'}"
            )
        if self.held:
            kept = ", ".join(f"{k}={knob_text(k, v)}" for k, v in self.held.items())
            lines.append(f"  the search kept {kept} (yours)")
        return lines

    def as_dict(self) -> dict[str, Any]:
        """best.yaml's `parity:` section: the verdict always, with why and the count."""
        block: dict[str, Any] = {"verdict": self.verdict, "why": self.why}
        if self.found is not None:
            block.update({k: v for k, v in self.found.as_dict().items() if k != "verdict"})
        block["reference"] = self.reference
        block["reference_runs"] = self.runs
        block["differing_trials"] = len(self.differing)
        block["cause"] = self.cause
        block["held_at_yours"] = dict(self.held)
        return block


def study_parity(study: optuna.Study, exported: str | None, precision: str) -> StudyParity:
    """The parity verdict of the config with key `exported` (None: nothing is exported)."""
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    differing = tuple(t.number for t in failed if TrialAttrs.of(t).kind in FLAGGED)
    causes = read_causes(study)
    cause = causes.named() if causes is not None else None
    held = causes.held() if causes is not None else {}
    runs = parity.reference_runs(study)
    against = parity.study_band(study, precision)
    verdict, why, found = _verdict(study, exported, against, runs, precision)
    return StudyParity(
        verdict=verdict,
        why=why,
        found=found,
        reference=_reference_text(study, runs),
        runs=against.runs if against else len(runs),
        reseeded=against.reseeded if against else 0,
        differing=differing,
        cause=cause,
        held=held,
    )


def _verdict(
    study: optuna.Study,
    exported: str | None,
    against: parity.Band | None,
    runs: list[optuna.trial.FrozenTrial],
    precision: str,
) -> tuple[str, str, parity.Parity | None]:
    yours = study.user_attrs.get(USERS_CONFIG)
    if yours is None or (not runs and study.user_attrs.get(NO_REFERENCE)):
        why = study.user_attrs.get(NO_REFERENCE) or "autotune does not know your config"
        return (
            NOT_CHECKED,
            f"not checked: {why}; the export is not known to train your model",
            None,
        )
    if not runs:
        return NOT_CHECKED, "not checked: your config has not run yet", None
    if against is None:
        return NOT_CHECKED, "not checked: your command's steps tell no loss (see docs)", None
    if exported is None:
        return NOT_CHECKED, "nothing exported", None
    if exported == yours:
        others = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if TrialAttrs.of(t).config_key not in (None, yours)
        ]
        reason = "the fastest" if others else "no other config trains your model"
        return YOURS, f"your own config is exported ({reason})", None
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if TrialAttrs.of(t).config_key == exported
    ]
    longest = parity.longest_run(done)
    found = parity.judge(TrialAttrs.of(longest).losses, against) if longest else None
    if found is None:
        return NOT_CHECKED, "not checked: the exported config told no loss", None
    if found.verdict == parity.DIFFERS:
        why = (
            f"differs: the exported config's loss moves {parity.pct(found.largest)} from "
            f"yours at step {found.at_step} (floor {parity.pct(found.floor)})"
        )
        return parity.DIFFERS, why, found
    why = (
        f"same: the exported config's loss stays within {parity.pct(found.largest)} of "
        f"yours over {found.steps} steps (floor {parity.pct(found.floor)} at that step, from "
        f"{found.floor_from})"
    )
    return "same", why, found


def _reference_text(study: optuna.Study, runs: list[optuna.trial.FrozenTrial]) -> str | None:
    """The user's config and where it came from: `zero=1,mbs=4 (your ds_config, ...)`."""
    if study.user_attrs.get(USERS_CONFIG) is None:
        return None
    label = display_label(TrialAttrs.of(runs[0]).label) if runs else "your config"
    source = study.user_attrs.get(USERS_CONFIG_FROM)
    return f"{label}, from {source}" if source else label
