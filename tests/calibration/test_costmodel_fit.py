"""The model's GPU defaults are what refitting them to the published runs gives: a change to
the model that moves the fit fails here until the constants (scripts/fit_costmodel.py) follow."""

import pytest

from autotune.calibration.published import Case, cases, fitted_defaults
from autotune.engines import get_engine
from autotune.estimate.calibration import DEFAULT_CALIBRATION, Calibration, default_calibration


@pytest.fixture(scope="module")
def fitted() -> dict[str, Calibration]:
    return fitted_defaults()


def test_the_code_states_the_fit_of_the_published_runs(fitted: dict[str, Calibration]) -> None:
    assert set(fitted) == {"ampere", "hopper"}
    for generation, cal in fitted.items():
        assert DEFAULT_CALIBRATION[generation] == cal, generation


def test_generations_without_fp8_pairs_take_hoppers_fp8_fit(
    fitted: dict[str, Calibration],
) -> None:
    """Blackwell has no published bf16/FP8 pair: its calibration (and Megatron's on it) takes
    the FP8 share fitted to Hopper's pairs, not the full FP8 peak."""
    hoppers_fit = fitted["hopper"].fp8_efficiency
    assert hoppers_fit < 1
    for engine in (None, "megatron", "deepspeed"):
        traits = None if engine is None else get_engine(engine).traits
        assert default_calibration("blackwell", traits).fp8_efficiency == hoppers_fit, engine


def test_every_row_left_out_says_why() -> None:
    reasons = [c for c in cases() if not isinstance(c, Case)]
    used = sum(isinstance(c, Case) for c in cases())
    assert used >= 200 and all(isinstance(r, str) and r for r in reasons)
    assert any("offload" in r for r in reasons)  # DeepSpeed's ZeRO-Offload rows (S15)
