"""One config run as a study trial: its attributes set, the trial launched with a heartbeat,
its outcome told to Optuna (complete with tokens/s, failed with its kind),
and a note for the dashboard."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import optuna
from optuna.trial import TrialState
from optuna_dashboard import save_note

from autotune import runner as trials
from autotune.launchers import Launcher
from autotune.nodes.check import keep_out
from autotune.problem import Problem
from autotune.space import TrainConfig
from autotune.study.record.dashboard_note import trial_note
from autotune.study.record.optuna_private import with_heartbeat
from autotune.study.record.owner import owner_tag
from autotune.study.record.storage import INTERRUPTED, StudyRef
from autotune.study.record.trial_attrs import (
    COMMAND,
    CONFIG,
    CONFIG_KEY,
    ERROR,
    FOLDER,
    KIND,
    LABEL,
    OWNER,
    QUEUE,
    RANKED_BY,
    SLOW_NODES,
    SOURCE,
    SWEPT,
    TRIAL_NODES,
    USERS_CONFIG,
    WALL,
    TrialAttrs,
)
from autotune.study.verdict import parity
from autotune.study.verdict.parity_cause import (
    ALIKE,
    REPEATED_FAILURES,
    differs_note,
    failure_gist,
    moves_text,
)
from autotune.trial.spec import ParityPlan, StepPlan, TrialSpec

if TYPE_CHECKING:
    from autotune.study.slice.trials import SliceRun
from autotune.units import human_duration


class Progress(Protocol):
    def started(self, number: int, label: str) -> None: ...
    def finished(
        self, number: int, label: str, record: trials.TrialRecord, best: float | None
    ) -> None: ...


class QuietProgress:
    """A `Progress` that prints nothing."""

    def started(self, number: int, label: str) -> None:
        pass

    def finished(
        self, number: int, label: str, record: trials.TrialRecord, best: float | None
    ) -> None:
        pass


AUTOTUNE_ERROR = "autotune_error"
"""The kind of a trial that failed in autotune itself (not in the trial's processes)."""
SCRIPT_FAULTS = ("script_error", "no_steps", "config_ignored")
"""Failures of a user's script that no other config would fix."""


def found_slow_again(study: optuna.Study, nodes: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `nodes` (found slow by the trial just told) that an earlier trial found slow."""
    found = [
        node
        for t in study.get_trials(deepcopy=False)
        if isinstance(slow := t.user_attrs.get(SLOW_NODES), list)
        for node in slow
    ]
    return tuple(node for node in nodes if found.count(node) >= 2)


def stop_after(run: StudyRun, record: trials.TrialRecord) -> str | None:
    """Why to stop the study after `record`, before any config was measured: every trial so
    far timed out (the limit is too short for a trial here), or the user's script cannot run,
    ends too early, ignores its config or failed twice alike (a crash's message, numbers and
    paths aside: `failure_gist`), and every trial would fail the same. At any time: a node
    found slow by a second trial (one profiled step of one trial can read a healthy node slow
    on a busy host) that cannot be kept out of later trials."""
    study, problem = run.study, run.problem
    if record.kind == "slow_node":
        confirmed = found_slow_again(study, record.slow_nodes)
        needed = record.result.nodes if record.result and record.result.nodes else 1
        return keep_out(run.launcher, confirmed, needed, str(record.error)) if confirmed else None
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if any(t.value is not None for t in done):
        return None
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    timeouts = [t for t in failed if TrialAttrs.of(t).kind == "timeout"]
    if record.kind == "timeout" and len(timeouts) >= ALIKE and len(timeouts) == len(failed):
        return (
            f"the first {len(timeouts)} trials all timed out at --timeout-per-trial "
            f"{human_duration(run.timeout_s)}: raise it (a trial needs its launch, warm-up and "
            "measured steps within it)"
        )
    if problem.job is None:
        return None
    if record.kind in SCRIPT_FAULTS:
        return f"the script failed before any config was measured ({record.kind}): {record.error}"
    gist = failure_gist(str(record.error or ""))
    alike = [t for t in failed if failure_gist(str(TrialAttrs.of(t).error or "")) == gist]
    if record.kind in REPEATED_FAILURES and gist and len(alike) >= ALIKE:
        return (
            f"the script failed alike {len(alike)} times before any config was measured "
            f"({record.kind}): {record.error}"
        )
    return None


@dataclass(frozen=True)
class StudyRun:
    """What every trial of one run of the study shares: the problem, where the study lives,
    the launcher, who hears of each trial, and how long a trial may take."""

    problem: Problem
    ref: StudyRef
    study: optuna.Study
    launcher: Launcher
    progress: Progress
    timeout_s: float
    slice: SliceRun | None = None
    """Trials on a slice of the cluster, extrapolated to the whole (`study.slice`)."""


def run_one(
    run: StudyRun,
    trial: optuna.Trial,
    config: TrainConfig,
    key: str,
    steps: StepPlan,
    measured: trials.TrialRecord | None = None,
    parity: ParityPlan | None = None,
) -> trials.TrialRecord:
    """Run `config` (its key `key`) as `trial` for `steps` and tell its outcome; `measured`:
    its run already made, moved to the trial's folder and told as this trial instead of
    launching it again; `parity`: what its ranks do for loss parity (a reseeded run of the
    user's config, or the user's curve to stop at once the loss leaves it)."""
    study, launcher = run.study, run.launcher
    label = config.label()
    for name, value in {
        CONFIG: config.as_dict(),
        CONFIG_KEY: key,
        LABEL: label,
        OWNER: owner_tag(),
        SOURCE: launcher.source,
    }.items():
        trial.set_user_attr(name, value)
    folder = run.ref.folder / "trials" / str(trial.number)
    trial.set_user_attr(FOLDER, str(folder))
    # A run already made (the user's model read) was at full size: told as it is.
    sliced = run.slice.trial(config) if run.slice is not None and measured is None else None
    spec = sliced.spec(steps) if sliced else run.problem.trial_spec(config, steps)
    if parity is not None and run.problem.job is not None:
        spec = dataclasses.replace(spec, parity=parity)
    run.progress.started(trial.number, label)
    if sliced is not None and sliced.view.why_not:
        record = sliced.model_record(folder)
    elif measured is not None:
        record = trials.moved(measured, folder, run.problem.engine, launcher, run.timeout_s)
    else:
        record = with_heartbeat(study, trial, lambda: _run_or_interrupt(run, trial, spec, folder))
    if sliced is not None:
        record = sliced.extrapolated(record)
        for name, value in sliced.attrs(record).items():
            trial.set_user_attr(name, value)
    elif run.slice is not None:  # the run that read the user's model: the whole cluster's
        trial.set_user_attr(TRIAL_NODES, run.problem.cluster.nodes)
        trial.set_user_attr(RANKED_BY, "full")
    for name, value in _attrs(record).items():
        trial.set_user_attr(name, value)
    record = _parity(run, trial, config, record)
    predicted = TrialAttrs.of(trial).predicted
    note = trial_note(config, record.kind, launcher.source, record.error, record.result, predicted)
    save_note(trial, note)
    if record.kind == "ok" and record.result is not None:
        study.tell(trial, record.result.tokens_per_s)
    else:
        study.tell(trial, state=TrialState.FAIL)
    return record


def _run_or_interrupt(
    run: StudyRun, trial: optuna.Trial, spec: TrialSpec, folder: Path
) -> trials.TrialRecord:
    try:
        return trials.run(spec, run.problem.engine, run.launcher, folder, run.timeout_s)
    except BaseException as exc:
        # Ctrl-C, SIGTERM or SIGHUP: the launcher has stopped the trial's processes; the trial
        # is interrupted, so the study stays consistent and a resume may run the config
        # again. Anything else failed in autotune itself: recorded as that, with its cause.
        stopped = isinstance(exc, KeyboardInterrupt | SystemExit)
        trial.set_user_attr(KIND, INTERRUPTED if stopped else AUTOTUNE_ERROR)
        cause = f"{type(exc).__name__}: {exc}"
        trial.set_user_attr(ERROR, "interrupted by the user (or a signal)" if stopped else cause)
        run.study.tell(trial, state=TrialState.FAIL)
        raise


def _parity(
    run: StudyRun, trial: optuna.Trial, config: TrainConfig, record: trials.TrialRecord
) -> trials.TrialRecord:
    """A trial that ran, as `differs` when its loss curve leaves the user's config's
    (`study.verdict.parity`); its outcome.json says so too."""
    if record.kind != "ok" or record.result is None or not record.result.losses:
        return record
    if TrialAttrs.of(trial).config_key == run.study.user_attrs.get(USERS_CONFIG):
        return record  # a run of the user's config is the reference, never judged
    precision = run.problem.workload.precision
    result = parity.of_trial(run.study, trial.number, record.result.losses, precision)
    reference = parity.reference_runs(run.study)
    if result is None or result.verdict != parity.DIFFERS or not reference:
        return record
    error = differs_note(result, moves_text(config, TrialAttrs.of(reference[0]).config))
    trial.set_user_attr(KIND, parity.DIFFERS)
    trial.set_user_attr(ERROR, error)
    record = dataclasses.replace(record, kind=parity.DIFFERS, error=error)
    trials.write_outcome(record)
    return record


def _attrs(record: trials.TrialRecord) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        KIND: record.kind,
        ERROR: record.error,
        COMMAND: record.command,
        WALL: record.wall_s,
        QUEUE: record.queue_s,
    }
    if record.swept:
        attrs[SWEPT] = list(record.swept)
    if record.slow_nodes:
        attrs[SLOW_NODES] = list(record.slow_nodes)
    if record.result is not None:
        attrs.update(record.result.figures())
    return attrs
