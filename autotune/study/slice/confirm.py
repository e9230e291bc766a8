"""A slice study's leaders measured at full size before export, and the slice-to-full error
they measure: log(full / extrapolated) tokens/s, kept on the study (`SLICE_ERROR`) and, by
`tune`, for the cluster's next study."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from autotune.estimate.calibration import Calibration
from autotune.problem import Problem
from autotune.space import TrainConfig, config_key
from autotune.specs import Cluster
from autotune.study.choices import StudySpace
from autotune.study.record.storage import stored_specs
from autotune.study.record.trial_attrs import (
    FULL_OF,
    RANKED_BY,
    SCALE_PROBE,
    SLICE_ERROR,
    SLICE_STUDY,
    TRIAL_NODES,
    TrialAttrs,
)
from autotune.study.record.verdicts import best_value
from autotune.study.slice._claims import TimeLeft, any_interrupted, await_trials, marked, take
from autotune.study.slice.cost import cost_line, ranked_line, study_cost
from autotune.study.slice.scale import ScaleView, apart_in_share, probe_nodes
from autotune.study.slice.trials import SliceRun, SliceSettings
from autotune.study.trial_run import StudyRun, run_one
from autotune.study.verdict.confirm import Ranking, Standing, repeat_winner, standings
from autotune.study.verdict.noise import measurements
from autotune.study.verdict.slice_standings import full_size, full_standings, is_slice_study
from autotune.trial.spec import read_json, write_atomically

if TYPE_CHECKING:
    from autotune.study.search.guided.search import GuidedSearch
    from autotune.study.settings import SearchSettings

"""On the study: {"error": mean log(full / extrapolated), "configs": [[label, full,
extrapolated], ...]} over its leaders measured at full size."""


def slice_run(
    problem: Problem,
    study: optuna.Study,
    settings: SliceSettings | None,
    calibration: Callable[[], Calibration],
) -> SliceRun | None:
    """The slice a study's search trials run on (None: the whole cluster), kept on the
    study so its report and export say so."""
    if settings is None or settings.nodes == problem.cluster.nodes:
        return None
    study.set_user_attr(SLICE_STUDY, settings.nodes)
    return SliceRun(settings, problem, calibration)


def confirm_full(
    run: StudyRun, space: StudySpace, settings: SearchSettings, time_left: TimeLeft
) -> list[int]:
    """The slice's leaders measured once at full size, `confirm_full` of them in all (a
    resumed study counts those it has), each the best of the rest as the extrapolation's miss
    learnt so far ranks them (`slice.scale`): first from scale probes, then from each
    confirmation, while `time_left()`; the trial numbers of the probes and confirmations.
    A launch another worker took at once is awaited; one interrupted (its tuner stopped or
    died) counts for nothing and is made again. Records the slice-to-full error."""
    s = settings.slice
    if s is None or not s.confirm_full or run.slice is None:
        return []
    study = run.study
    view = ScaleView(study, run.problem, s.nodes, run.slice.calibration)
    numbers = probe_scale(run, space, settings, view, time_left)
    full_run = dataclasses.replace(run, slice=None)
    while True:
        done: set[int] = set()
        others = []
        while time_left():
            done |= marked(study, FULL_OF)  # other workers' too, as they take them
            if len(done) >= s.confirm_full:
                break
            standing = next((st for st in view.ranked() if st.first not in done), None)
            if standing is None:
                break
            done.add(standing.first)
            params = space.params(standing.config)
            trial = take(study, FULL_OF, standing.first, params, space.distributions)
            if isinstance(trial, int):
                others.append(trial)
            if not isinstance(trial, optuna.Trial):
                continue
            extrapolated = f"trial {standing.first} extrapolated"
            label = f"{standing.config.label()} (at full size, {extrapolated})"
            _run_full(full_run, trial, standing.config, settings, label)
            numbers.append(trial.number)
        await_trials(study, others, time_left)
        if not (any_interrupted(study, others) and time_left()):  # a dead worker's: again
            break
    record_error(study)
    return numbers


def probe_scale(
    run: StudyRun,
    space: StudySpace,
    settings: SearchSettings,
    view: ScaleView,
    time_left: TimeLeft,
) -> list[int]:
    """Leaders measured again on twice the slice's nodes (where that is a slice of the
    cluster); their trial numbers. Until one such probe has completed, the `probes` best
    measured with the job's own layout whose traffic shares lie apart (NCCL variants of one
    layout tell no slope): how they slow tells the miss per doubling. Each time, the
    `probes` best proxies not yet probed, as the miss ranks them, whose own layout fits
    there: what they measure stands for their proxy's extrapolation, whose error is its
    own. No more once `time_left()` says the time budget is spent; a probe another worker
    took at once is awaited, and run here if it was interrupted."""
    s, sliced = settings.slice, run.slice
    assert s is not None and sliced is not None
    nodes = probe_nodes(s.nodes, run.problem.cluster.nodes)
    if nodes is None or not s.probes:
        return []
    study = run.study
    probed = marked(study, SCALE_PROBE)
    wider = dataclasses.replace(sliced, settings=dataclasses.replace(sliced.settings, nodes=nodes))
    ranked = [st for st in view.ranked() if st.first not in probed]
    own = [st for st in ranked if st.trial.user_attrs.get(RANKED_BY) == "slice"]
    proxies = (st for st in ranked if st.trial.user_attrs.get(RANKED_BY) == "proxy")
    chosen = (
        []
        if view.slope_probed()
        else apart_in_share(own, s.probes, run.problem, wider.calibration())
    )
    chosen += [st for st in proxies if _holds_own_layout(wider, st.config)][: s.probes]
    probe_run = dataclasses.replace(run, slice=wider)
    steps = dataclasses.replace(settings.steps, best_s=None)
    numbers: list[int] = []
    while chosen and time_left():
        others: dict[int, Standing] = {}
        for standing in chosen:
            if not time_left():
                break
            params = space.params(standing.config)
            trial = take(study, SCALE_PROBE, standing.first, params, space.distributions)
            if isinstance(trial, int):
                others[trial] = standing
            if not isinstance(trial, optuna.Trial):
                continue
            key = config_key(standing.config)
            record = run_one(probe_run, trial, standing.config, key, steps)
            label = f"{standing.config.label()} (on {nodes} nodes, trial {standing.first} again)"
            run.progress.finished(trial.number, label, record, best_value(study))
            numbers.append(trial.number)
        await_trials(study, list(others), time_left)
        chosen = [others[n] for n in others if any_interrupted(study, [n])]
    return numbers


def was_probed(study: optuna.Study) -> bool:
    """Whether a scale probe of the study completed (a resumed slice study's)."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return any(TrialAttrs.of(t).scale_probe_of is not None for t in done)


def _holds_own_layout(wider: SliceRun, config: TrainConfig) -> bool:
    view = wider.trial(config).view
    return view.why_not is None and view.proxy is None


def learn_scale(
    run: StudyRun,
    space: StudySpace,
    settings: SearchSettings,
    guide: GuidedSearch,
    time_left: TimeLeft,
) -> Callable[[optuna.Study], tuple[float | None, float]] | None:
    """The scale probes run (`probe_scale`), and the guided search's full-size predictions
    moved by the miss they learn; the best the search's stop rule must beat from then on,
    moved alike; None where no probe ran or they learnt no miss (nothing moves), and with
    `--confirm-full 0`, whose winner is the plain extrapolation's and runs nowhere else."""
    s = settings.slice
    if run.slice is None or s is None or not s.confirm_full:
        return None
    view = ScaleView(run.study, run.problem, s.nodes, run.slice.calibration)
    probe_scale(run, space, settings, view, time_left)
    slope = view.fit().traffic
    if not slope:
        return None
    guide.rescale(slope)
    return lambda _: view.best_moved(slope)


def _run_full(
    run: StudyRun, trial: optuna.Trial, config: TrainConfig, settings: SearchSettings, label: str
) -> None:
    """`config` launched on the whole cluster as `trial`, against no step time to beat."""
    trial.set_user_attr(TRIAL_NODES, run.problem.cluster.nodes)
    trial.set_user_attr(RANKED_BY, "full")
    steps = dataclasses.replace(settings.steps, best_s=None)
    record = run_one(run, trial, config, config_key(config), steps)
    run.progress.finished(trial.number, label, record, best_value(run.study))


def slice_ranking(run: StudyRun) -> Ranking:
    """How a slice study whose leaders run at full size ranks them in its repeats on the
    slice, as its confirmations do: the `slice_standings`, by their extrapolation moved by
    the scale miss learnt so far (`ScaleView.ranked`), best first."""
    assert run.slice is not None
    view = ScaleView(run.study, run.problem, run.slice.settings.nodes, run.slice.calibration)
    return lambda _study: view.ranked()


def repeat_full_winner(
    run: StudyRun, space: StudySpace, settings: SearchSettings, time_left: TimeLeft
) -> list[int]:
    """The winner among the leaders measured at full size, launched there again
    `Effort.after_choice` times (measured studies that confirm, as `confirm.repeat_winner`),
    each while `time_left()`: its figures are stated from these launches; their trial
    numbers."""
    s = settings.slice
    if s is None or not s.confirm_full or run.slice is None or not settings.budget.confirm:
        return []
    full_run = dataclasses.replace(run, slice=None)

    def launch(trial: optuna.Trial, config: TrainConfig) -> None:
        label = f"{config.label()} (at full size, repeat of trial {TrialAttrs.of(trial).confirms})"
        _run_full(full_run, trial, config, settings, label)

    return repeat_winner(
        run.study,
        space.params,
        space.distributions,
        launch,
        settings.budget.effort.after_choice,
        time_left,
        ranking=full_standings,
    )


def record_error(study: optuna.Study) -> dict[str, Any] | None:
    """The slice-to-full error of the study's configs measured at full size: the mean of
    their full-size launches against that of their slice launches' extrapolations (each
    side on all its launches, so one noisy launch weighs less), set on the study; None when
    no pair was measured."""
    ranked = {s.first: s for s in standings(study)}
    pairs = []
    for full in full_size(list(ranked.values())):
        first = study.trials[full.first].user_attrs.get(FULL_OF)
        sliced = ranked.get(first) if first is not None else None
        if sliced is not None and sliced.trial.user_attrs.get(RANKED_BY) in ("slice", "proxy"):
            label = sliced.trial.user_attrs.get("label", "")
            pairs.append((label, _all_launches(study, full), sliced.tokens_per_s))
    if not pairs:
        return None
    error = {
        "error": statistics.fmean(math.log(full / extra) for _, full, extra in pairs),
        "configs": [list(p) for p in pairs],
    }
    study.set_user_attr(SLICE_ERROR, error)
    return error


def _all_launches(study: optuna.Study, standing: Standing) -> float:
    """Mean tokens/s of all a config's launches, its repeats after the choice included."""
    values = [t.value for t in measurements(study)[standing.first] if t.value]
    return math.exp(statistics.fmean(math.log(v) for v in values))


def read_error(path: Path) -> float:
    """The slice-to-full error kept for the cluster (0 when none was measured)."""
    data = read_json(path) or {}
    return float(data.get("error", 0.0))


def keep_error(study: optuna.Study, path: Path) -> dict[str, Any] | None:
    """The study's slice-to-full error, kept beside the cluster's calibration for its next
    study; None when it measured none."""
    error = study.user_attrs.get(SLICE_ERROR)
    if error is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({**error, "study": study.study_name}, indent=2) + "\n")
    return dict(error)


def error_line(error: dict[str, Any]) -> str:
    """The summary's line: how far the slice's extrapolation was from the full-size runs."""
    worst = max((math.log(full / extra) for _, full, extra in error["configs"]), key=abs)
    return (
        f"slice-to-full error on {len(error['configs'])} leaders measured at full size: "
        f"{math.expm1(error['error']):+.1%} mean, {math.expm1(worst):+.1%} worst "
        "(kept for this cluster's next slice study)"
    )


def with_kept_error(settings: SliceSettings | None, path: Path) -> SliceSettings | None:
    """The slice settings moved by the error kept for the cluster."""
    if settings is None:
        return None
    return dataclasses.replace(settings, error=read_error(path))


def say_slice(
    study: optuna.Study, cluster: Cluster, path: Path, say: Callable[[str], None]
) -> None:
    """The slice study's trials, cost and slice-to-full error, said; the error kept for the
    cluster."""
    keep_error(study, path)
    for line in slice_lines(study, cluster):
        say(line)


def slice_lines(study: optuna.Study, cluster: Cluster | None = None) -> list[str]:
    """What the summary and the report say of a slice study: how its trials were ranked,
    what they cost, the slice-to-full error; [] for a study on the whole cluster."""
    if not is_slice_study(study):
        return []
    cluster = cluster or stored_specs(study)[2]
    error = study.user_attrs.get(SLICE_ERROR)
    lines = [ranked_line(study), cost_line(study_cost(study, cluster))]
    return lines + ([error_line(error)] if error else [])
