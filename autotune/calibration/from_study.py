"""`autotune calibrate --study`: fit the model to a study's measured trials and save it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.calibration.saved import calibration_path, load_calibration, save_calibration
from autotune.engines import get_engine
from autotune.errors import InputError
from autotune.estimate.calibrate import Observation, fit, median_abs_pct_error
from autotune.estimate.calibration import Calibration
from autotune.space import config_key
from autotune.study.record.storage import stored_specs
from autotune.study.record.trial_attrs import TrialAttrs

MIN_TRIALS = 3


@dataclass(frozen=True)
class CalibrationReport:
    trials: int
    before: Calibration
    after: Calibration
    held_out_before: float | None
    held_out_after: float | None
    """Median absolute error on configs left out of the fit (two folds of whole configs, all
    the repeats of a config in one), None with fewer than `MIN_TRIALS` configs a fold."""
    in_sample_before: float
    in_sample_after: float
    """Median absolute error on every measured trial, the fit's own."""
    saved_to: list[Path]


def observations(study: optuna.Study) -> list[Observation]:
    engine, workload, cluster = stored_specs(study)
    traits = get_engine(engine).traits
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    done = [TrialAttrs.of(t) for t in trials]
    return [
        Observation(workload, cluster, a.config, traits, step)
        for a in done
        if a.source == "measured" and (step := a.step_time_s)
    ]


def config_folds(data: list[Observation]) -> tuple[list[Observation], list[Observation]]:
    """Two folds of whole configs, dealt alternately in the order first measured: every
    measurement of a config (its trial and its repeats) lies in one fold, so the other
    fold's error is on configs the fit never saw."""
    keys = list(dict.fromkeys(config_key(o.config) for o in data))
    first = set(keys[::2])
    return (
        [o for o in data if config_key(o.config) in first],
        [o for o in data if config_key(o.config) not in first],
    )


def calibrate_study(study: optuna.Study, study_folder: Path, results: Path) -> CalibrationReport:
    data = observations(study)
    if len(data) < MIN_TRIALS:
        raise InputError(
            f"study {study.study_name!r} has {len(data)} measured trials; "
            f"calibration needs at least {MIN_TRIALS}"
        )
    cluster = data[0].cluster
    before, _ = load_calibration(results, cluster, stored_specs(study)[0])
    after = fit(data, before)
    halves = config_folds(data)
    held_before = held_after = None
    if min(len({config_key(o.config) for o in half}) for half in halves) >= MIN_TRIALS:
        held_before = statistics.mean(
            median_abs_pct_error(before, test) for _, test in (halves, halves[::-1])
        )
        held_after = statistics.mean(
            median_abs_pct_error(fit(train, before), test)
            for train, test in (halves, halves[::-1])
        )
    meta = {"study": study.study_name, "trials": len(data), "cluster": cluster.name}
    paths = [study_folder / "calibration.json", calibration_path(results, cluster)]
    for path in paths:
        save_calibration(path, after, meta)
    return CalibrationReport(
        trials=len(data),
        before=before,
        after=after,
        held_out_before=held_before,
        held_out_after=held_after,
        in_sample_before=median_abs_pct_error(before, data),
        in_sample_after=median_abs_pct_error(after, data),
        saved_to=paths,
    )
