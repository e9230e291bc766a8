"""Ask a config, run it for real, tell the result: until the budget or the space runs out.

Optuna in ask-and-tell form, since trials run out of process. A proposal that breaks a rule
or repeats a config that already has a verdict is told as pruned with its reason and costs
no budget; one that runs is told complete (tokens/s) or failed (with its kind).
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState
from optuna_dashboard import save_note

from autotune.errors import InputError
from autotune.estimate.predict import Estimate, estimate
from autotune.estimate.steptime import Calibration
from autotune.launchers import Launcher
from autotune.launchers.early_stop import EarlyStop
from autotune.problem import Problem
from autotune.report.dashboard import trial_note
from autotune.space import TrainConfig, config_key, first_violation
from autotune.study.choices import StudySpace
from autotune.study.confirm import LONGER, confirm
from autotune.study.guided import GuidedSearch
from autotune.study.samplers import ENQUEUEING
from autotune.study.storage import (
    INTERRUPTED,
    StudyRef,
    fail_abandoned_trials,
    heartbeat,
    owner_tag,
)
from autotune.trial import folder as trials
from autotune.trial.spec import StepPlan, TrialSpec

SEEDS = 3
"""Top predicted configs a new study runs first."""
MAX_MISSES = 25
"""Proposals in a row that cannot run before the loop picks an unmeasured config itself."""

METRIC_KEYS = (
    "step_time_s",
    "step_time_stdev_s",
    "tokens_per_s",
    "tflops_per_device",
    "mfu",
    "peak_memory_bytes",
    "model_state_bytes",
    "profile",
    "warmup_steps",
    "measured_steps",
    "nccl_version",
)


@dataclass(frozen=True)
class Budget:
    trials: int | None = 8
    """Trials that ran in the study, counting those of earlier runs."""
    max_time_s: float | None = None
    """No new trial starts once this run has lasted this long."""
    timeout_per_trial_s: float = 600.0
    early_stop_margin: float | None = 0.10
    """Stop a trial whose steps are clearly slower than the best so far by this fraction;
    None turns early stopping off."""
    confirm: bool = True
    """Re-measure leaders within noise of each other with longer trials before naming one."""


@dataclass(frozen=True)
class StudyOutcome:
    ran: int
    """Trials run by this invocation."""
    finished_total: int
    stop_reason: str
    resumed_failed: list[int] = field(default_factory=list)
    confirmations: list[int] = field(default_factory=list)
    """Trials that re-measured the leaders (see study.confirm)."""


class Progress(Protocol):
    def started(self, number: int, label: str) -> None: ...
    def finished(
        self, number: int, label: str, record: trials.TrialRecord, best: float | None
    ) -> None: ...


def verdicts(study: optuna.Study) -> dict[str, int]:
    """Config key -> trial number, for configs that completed, failed or were stopped early
    (not those interrupted, which may run again)."""
    found: dict[str, int] = {}
    states = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
    for t in study.get_trials(deepcopy=False, states=states):
        if "config_key" in t.user_attrs and t.user_attrs.get("kind") != INTERRUPTED:
            found.setdefault(t.user_attrs["config_key"], t.number)
    return found


def early_stop_bar(study: optuna.Study, budget: Budget) -> EarlyStop | None:
    """The bar a running trial must not clearly exceed: the best step time so far plus the
    margin; None before any trial completed or when early stopping is off."""
    if budget.early_stop_margin is None:
        return None
    times = [
        t.user_attrs["step_time_s"]
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("step_time_s")
    ]
    return EarlyStop(bar_s=min(times) * (1 + budget.early_stop_margin)) if times else None


def claim(study: optuna.Study, trial: optuna.Trial, key: str) -> int | None:
    """Mark the config as this trial's; the number of an earlier trial that holds it (running
    or with a verdict) when two workers took it at once, else None."""
    trial.set_user_attr("claim", key)

    def holds(t: FrozenTrial) -> bool:
        if t.number >= trial.number or t.user_attrs.get("kind") == INTERRUPTED:
            return False
        if t.state == TrialState.RUNNING:
            return t.user_attrs.get("claim") == key
        return t.user_attrs.get("config_key") == key and t.state in (
            TrialState.COMPLETE,
            TrialState.FAIL,
            TrialState.PRUNED,
        )

    holders = [t.number for t in study.get_trials(deepcopy=False) if holds(t)]
    return min(holders) if holders else None


def best_value(study: optuna.Study) -> float | None:
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return max((t.value for t in done if t.value is not None), default=None)


def memory_verdicts(
    problem: Problem, valid: tuple[TrainConfig, ...], cal: Calibration
) -> tuple[list[Estimate], dict[str, str]]:
    """Predictions of the configs that fit, best first; and why each other one cannot fit."""
    fitting, too_big = [], {}
    for config in valid:
        e = estimate(problem.workload, config, problem.cluster, problem.engine.name, cal)
        if e.fits:
            fitting.append(e)
        else:
            too_big[config_key(config)] = memory_reason(e, problem.cluster.device.memory_bytes)
    fitting.sort(key=lambda e: -e.tokens_per_s)
    return fitting, too_big


def memory_reason(e: Estimate, device_bytes: float) -> str:
    parts = ", ".join(
        f"{k} {v / 2**30:.1f}" for k, v in e.memory.as_dict().items() if k != "total" and v
    )
    return (
        f"predicted not to fit: {e.memory.total / 2**30:.1f} GiB per rank > "
        f"{device_bytes / 2**30:.1f} GiB ({parts} GiB)"
    )


def running_keys(study: optuna.Study) -> set[str]:
    """Configs other workers are measuring right now."""
    return {
        t.user_attrs["claim"]
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if "claim" in t.user_attrs
    }


def run_study(
    problem: Problem,
    ref: StudyRef,
    study: optuna.Study,
    launcher: Launcher,
    budget: Budget,
    steps: StepPlan,
    progress: Progress,
    seed: int | None = None,
    calibration: Calibration | None = None,
    strategy: str = "guided",
    seed_from_plan: bool = True,
) -> StudyOutcome:
    """Search until the budget, the space or (guided) the stop rule says so.

    `strategy` is "guided" (the model proposes), "grid" (enumeration order) or an Optuna
    sampler's name (the study's sampler proposes; unless `seed_from_plan` is off, the plan's
    best configs run first).
    """
    valid = problem.enumerate().require_some().valid
    space = StudySpace.from_valid(valid)
    space.bind(study)
    cal = calibration or Calibration()
    ranked, too_big = memory_verdicts(problem, valid, cal)
    if not ranked:
        raise InputError(
            f"none of the {len(valid)} valid configs is predicted to fit in "
            f"{problem.cluster.device.memory_bytes / 2**30:.1f} GiB per device"
        )
    guide = (
        GuidedSearch(problem, [e.config for e in ranked], cal, seed)
        if strategy == "guided"
        else None
    )
    in_order = [c for c in valid if config_key(c) not in too_big]
    if strategy not in ENQUEUEING and seed_from_plan and not study.get_trials(deepcopy=False):
        for e in ranked[:SEEDS]:  # a new study starts where the model expects the best
            study.enqueue_trial(space.params(e.config), user_attrs={"seeded_by": "plan"})
    resumed_failed = fail_abandoned_trials(study)
    seen = verdicts(study)
    rng = random.Random(seed)
    misses, ran, start = 0, 0, time.monotonic()

    def budget_reason() -> str | None:
        if budget.trials is not None and len(seen) >= budget.trials:
            return f"trial budget reached ({len(seen)} trials)"
        if budget.max_time_s is not None and time.monotonic() - start >= budget.max_time_s:
            return f"time budget reached ({budget.max_time_s:.0f} s)"
        if len(seen) >= len(ranked):
            return (
                f"search space exhausted: all {len(ranked)} valid configs that fit were measured"
            )
        return None

    def next_config() -> tuple[TrainConfig | None, str | None]:
        """The guided or grid proposal (None, why) when there is none."""
        claimed = set(seen) | running_keys(study)
        if guide is not None:
            guide.learn(study.get_trials(deepcopy=False))
            why = guide.converged(claimed, best_value(study))
            if why:
                return None, why
            config = guide.propose(claimed)
        else:
            config = next((c for c in in_order if config_key(c) not in claimed), None)
        return config, None if config else "search space exhausted: every config is claimed"

    def refreshed() -> str | None:
        """Every worker's verdicts read again, and whether the budget is spent. Each pass of
        the loop ends here, skipped or run: a proposal another worker has just measured is
        then known, instead of being proposed, refused as claimed, and proposed again."""
        nonlocal seen
        seen = verdicts(study)
        return budget_reason()

    reason = budget_reason()
    while reason is None:
        if strategy in ENQUEUEING:
            proposal, reason = next_config()
            if proposal is None:
                break
            study.enqueue_trial(space.params(proposal))
        elif misses >= MAX_MISSES:
            untried = [e.config for e in ranked if config_key(e.config) not in seen]
            study.enqueue_trial(space.params(rng.choice(untried)))
            misses = 0
        trial = study.ask(space.distributions)
        config = space.config(trial.params, problem.cluster.world_size)
        key = config_key(config)
        broken = first_violation(config, problem.workload, problem.cluster, problem.rules)
        if broken is not None or key in seen or key in too_big:
            if broken is not None:
                why = f"rule {broken.name}: {broken.reason}"
            elif key in too_big:
                why = too_big[key]
            else:
                why = f"config already measured in trial {seen[key]}"
            trial.set_user_attr("pruned_reason", why)
            study.tell(trial, state=TrialState.PRUNED)
            misses += 1
            reason = refreshed()
            continue
        misses = 0
        owner = claim(study, trial, key)
        if owner is not None:  # another worker took the same config a moment earlier
            trial.set_user_attr("pruned_reason", f"config claimed by trial {owner}")
            study.tell(trial, state=TrialState.PRUNED)
            reason = refreshed()
            continue
        predicted = estimate(
            problem.workload,
            config,
            problem.cluster,
            problem.engine.name,
            guide.calibration if guide is not None else cal,
        )
        trial.set_user_attr(
            "predicted",
            {
                "step_time_s": predicted.step.total_s,
                "memory_bytes": predicted.memory.total,
                "step": predicted.step.as_dict(),
            },
        )
        record = _run_one(
            problem, ref, study, trial, config, key, launcher, budget, steps, progress
        )
        ran += 1
        progress.finished(trial.number, config.label(), record, best_value(study))
        fail_abandoned_trials(study)  # other workers that died meanwhile
        reason = script_fault(problem, record, best_value(study)) or refreshed()
    confirmations: list[int] = []
    if budget.confirm and launcher.source == "measured":
        patient = dataclasses.replace(budget, early_stop_margin=None)
        longer = dataclasses.replace(steps, measured_steps=steps.measured_steps * LONGER)

        def run_confirmation(trial: optuna.Trial, config: TrainConfig) -> None:
            record = _run_one(
                problem,
                ref,
                study,
                trial,
                config,
                config_key(config),
                launcher,
                patient,
                longer,
                progress,
            )
            label = f"{config.label()} (confirming trial {trial.user_attrs['confirms']})"
            progress.finished(trial.number, label, record, best_value(study))

        def time_left() -> bool:
            limit = budget.max_time_s
            return limit is None or time.monotonic() - start < limit

        confirmations = confirm(
            study, space.params, space.distributions, run_confirmation, time_left
        )
    return StudyOutcome(
        ran=ran,
        finished_total=len(seen),
        stop_reason=reason or "",
        resumed_failed=resumed_failed,
        confirmations=confirmations,
    )


SCRIPT_FAULTS = ("script_error", "no_steps", "config_ignored")
"""Failures of a user's script that no other config would fix."""


def script_fault(problem: Problem, record: trials.TrialRecord, best: float | None) -> str | None:
    """Why to stop a study of the user's command before any config was measured: its script
    cannot run, ends too early or ignores its config, and every trial would fail the same."""
    if problem.job is None or best is not None or record.kind not in SCRIPT_FAULTS:
        return None
    return f"the script failed before any config was measured ({record.kind}): {record.error}"


def _run_one(
    problem: Problem,
    ref: StudyRef,
    study: optuna.Study,
    trial: optuna.Trial,
    config: Any,
    key: str,
    launcher: Launcher,
    budget: Budget,
    steps: StepPlan,
    progress: Progress,
) -> trials.TrialRecord:
    label = config.label()
    for name, value in {
        "config": config.as_dict(),
        "config_key": key,
        "label": label,
        "owner": owner_tag(),
        "source": launcher.source,
    }.items():
        trial.set_user_attr(name, value)
    folder = ref.folder / "trials" / str(trial.number)
    trial.set_user_attr("folder", str(folder))
    spec = problem.trial_spec(config, steps)
    progress.started(trial.number, label)
    record = _with_heartbeat(
        study,
        trial._trial_id,
        lambda: _run_or_interrupt(study, trial, spec, problem, launcher, folder, budget),
    )
    for name, value in _attrs(record).items():
        trial.set_user_attr(name, value)
    save_note(
        trial,
        trial_note(
            config,
            record.kind,
            launcher.source,
            record.error,
            record.result,
            trial.user_attrs.get("predicted"),
        ),
    )
    if record.kind == "ok" and record.result is not None:
        study.tell(trial, record.result["tokens_per_s"])
    elif record.kind == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)
    return record


def _run_or_interrupt(
    study: optuna.Study,
    trial: optuna.Trial,
    spec: TrialSpec,
    problem: Problem,
    launcher: Launcher,
    folder: Any,
    budget: Budget,
) -> trials.TrialRecord:
    try:
        return trials.run(
            spec,
            problem.engine,
            launcher,
            folder,
            budget.timeout_per_trial_s,
            early_stop_bar(study, budget),
        )
    except BaseException:
        # Ctrl-C or SIGTERM: the launcher has stopped the trial's processes; record the trial
        # as interrupted so the study stays consistent and a resume may run the config again.
        trial.set_user_attr("kind", INTERRUPTED)
        trial.set_user_attr("error", "interrupted by the user")
        study.tell(trial, state=TrialState.FAIL)
        raise


def _with_heartbeat(
    study: optuna.Study, trial_id: int, work: Callable[[], trials.TrialRecord]
) -> trials.TrialRecord:
    if not isinstance(study._storage, BaseHeartbeat):  # in-memory studies (benchmarks)
        return work()
    study._storage.record_heartbeat(trial_id)
    stop = threading.Event()
    beat = threading.Thread(target=heartbeat, args=(study, trial_id, stop), daemon=True)
    beat.start()
    try:
        return work()
    finally:
        stop.set()
        beat.join()


def _attrs(record: trials.TrialRecord) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "kind": record.kind,
        "error": record.error,
        "command": record.command,
        "wall_s": record.wall_s,
        "queue_s": record.queue_s,
    }
    if record.result:
        attrs.update({k: record.result.get(k) for k in METRIC_KEYS})
    return attrs
