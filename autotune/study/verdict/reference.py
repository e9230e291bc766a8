"""The user's own config as the reference: run first, run again when its run failed, then run
once more reseeded (`study.verdict.parity`), before any other config is measured, judged or ranked.

A study of the user's command knows their config (`USERS_CONFIG`: read from their config file
by the framework, or stated with `--users-config` or the space file's `yours:`). Until a run
of it completed, nothing else runs: a failure that another launch may not repeat (a crash, a
timeout, a lost node) launches it again, up to `MAX_TRIES`; one that would repeat (out of
memory) or the last try gives up, and the study says why in one line (`NO_REFERENCE`) and
judges nothing. Another worker of the study waits while a run of it is in flight.

The reference runs are long: every measured step of the plan, plus as many as warm-up may
take (`reference_plan`), so that the steps of any trial of the study are covered.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study.record.storage import INTERRUPTED
from autotune.study.record.trial_attrs import NO_REFERENCE, PARITY_RESEED, USERS_CONFIG, TrialAttrs
from autotune.trial.spec import StepPlan

MAX_TRIES = 3
"""Launches of the user's config before the study gives up on a reference."""
RETRIED = (
    "crash",
    "launch_error",
    "timeout",
    "comm_error",
    "node_fail",
    "cancelled",
    "preempted",
    "slow_node",
)
"""Failures another launch of the same config may not repeat."""
RESEED = 1_000_003
"""The seed the reseeded run's ranks take after its first optimizer step (any seed but the
one every trial starts from, `rank.loss.SEED`)."""

Step = Literal["first", "again", "reseeded", "wait", "ready", "none"]
"""What the reference needs next: its first run, another after a failure, the reseeded run,
to wait for another worker's run, nothing more (ready), or nothing at all (none: no
reference can be made, `why`)."""


@dataclass(frozen=True)
class Next:
    step: Step
    confirms: int | None = None
    """The completed run the reseeded one repeats."""
    why: str | None = None
    """Why no reference can be made (`none`)."""


def reference_plan(plan: StepPlan) -> StepPlan:
    """The steps of a run of the user's config: every measured step (no early end), plus as
    many as a warm-up may take, so that it covers any trial of the study."""
    return dataclasses.replace(
        plan,
        precision=0.0,
        measured_steps=plan.measured_steps + plan.max_warmup,
        best_s=None,
        margin=None,
    )


def next_step(study: optuna.Study) -> Next:
    """What the user's config needs before the search goes on."""
    key = study.user_attrs.get(USERS_CONFIG)
    if key is None:
        return Next("none", why=study.user_attrs.get(NO_REFERENCE))
    runs = [t for t in study.get_trials(deepcopy=False) if TrialAttrs.of(t).config_key == key]
    if any(t.state == TrialState.RUNNING for t in runs):
        return Next("wait")
    done = [t for t in runs if t.state == TrialState.COMPLETE]
    alike = [t for t in done if PARITY_RESEED not in t.user_attrs]
    if alike:
        return _reseeded(runs, alike)
    failed = [
        t for t in runs if t.state == TrialState.FAIL and TrialAttrs.of(t).kind != INTERRUPTED
    ]
    if not failed:
        return Next("first")
    last = TrialAttrs.of(max(failed, key=lambda t: t.number))
    if last.kind in RETRIED and len(failed) < MAX_TRIES:
        return Next("again")
    tries = f"{len(failed)} time{'s' if len(failed) > 1 else ''}"
    return Next("none", why=f"your config failed {tries}, last {last.kind}: {last.error}")


def _reseeded(runs: list[FrozenTrial], alike: list[FrozenTrial]) -> Next:
    """The reseeded run, where the first told its loss (the command's steps tell it) and no
    reseeded run completed or failed for good."""
    first = min(alike, key=lambda t: t.number)
    if not TrialAttrs.of(first).losses:
        return Next("ready")
    reseeded = [t for t in runs if PARITY_RESEED in t.user_attrs]
    if any(t.state == TrialState.COMPLETE for t in reseeded):
        return Next("ready")
    failed = [t for t in reseeded if TrialAttrs.of(t).kind != INTERRUPTED]
    if len(failed) >= MAX_TRIES or any(TrialAttrs.of(t).kind not in RETRIED for t in failed):
        return Next("ready")  # the floor stands on the first run and precision alone
    return Next("reseeded", confirms=first.number)


def give_up(study: optuna.Study, why: str) -> None:
    """Record once why the study has no reference."""
    if study.user_attrs.get(NO_REFERENCE) != why:
        study.set_user_attr(NO_REFERENCE, why)
