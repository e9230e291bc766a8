"""The fitter recovers the parameters that generated the step times it is given."""

import pytest

from autotune.engines import get_engine
from autotune.estimate.calibrate import BOUNDS, Observation, fit, median_abs_pct_error
from autotune.estimate.calibration import Calibration
from autotune.estimate.predict import estimate
from autotune.problem import load_problem


def test_fit_recovers_known_parameters() -> None:
    problem = load_problem("torch", "llama3-8b", "dgx-h100:4")
    truth = Calibration(
        compute_efficiency=0.41, gemm_half_size=900.0, bandwidth_scale=0.6, overlap=0.5
    )
    configs = problem.enumerate().valid[::40]
    data = [
        Observation(
            problem.workload,
            problem.cluster,
            c,
            get_engine("torch").traits,
            estimate(
                problem.workload, c, problem.cluster, get_engine("torch").traits, truth
            ).step.total_s,
        )
        for c in configs
    ]
    start = Calibration()
    assert median_abs_pct_error(start, data) > 0.2
    fitted = fit(data, start, rounds=10)
    assert median_abs_pct_error(fitted, data) < 0.02


def test_fit_rejects_unknown_parameters() -> None:
    with pytest.raises(ValueError, match="unknown calibration"):
        fit([], Calibration(), free=("magic",))


def test_fit_keeps_parameters_in_bounds() -> None:
    problem = load_problem("torch", "llama3-8b", "dgx-h100:4")
    c = problem.enumerate().valid[0]
    slow = (
        estimate(problem.workload, c, problem.cluster, get_engine("torch").traits).step.total_s
        * 1000
    )
    fitted = fit(
        [Observation(problem.workload, problem.cluster, c, get_engine("torch").traits, slow)],
        Calibration(),
    )
    for name, (lo, hi) in BOUNDS.items():
        assert lo <= getattr(fitted, name) <= hi, name
