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
from autotune.study.storage import stored_specs
from autotune.study.trial_attrs import TrialAttrs

MIN_TRIALS = 3


@dataclass(frozen=True)
class CalibrationReport:
    trials: int
    before: Calibration
    after: Calibration
    held_out_before: float | None
    held_out_after: float | None
    """Median absolute error on trials left out of the fit (two folds), None when too few."""
    in_sample_before: float
    in_sample_after: float
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
    halves = (data[::2], data[1::2])
    held_before = held_after = None
    if len(data) >= 2 * MIN_TRIALS:
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
