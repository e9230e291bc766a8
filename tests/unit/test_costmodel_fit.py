"""The model's GPU defaults are what refitting them to the published runs gives: a change to
the model that moves the fit fails here until the constants (scripts/fit_costmodel.py) follow."""

from autotune.calibration.published import Case, cases, fitted_defaults
from autotune.estimate.calibration import DEFAULT_CALIBRATION, Calibration


def test_the_code_states_the_fit_of_the_published_runs() -> None:
    fitted = fitted_defaults()
    assert set(fitted) == {"ampere", "hopper"}
    for generation, cal in fitted.items():
        assert DEFAULT_CALIBRATION[generation] == cal, generation


def test_generations_without_fp8_pairs_take_hoppers_fp8_fit() -> None:
    """Blackwell's calibration is the generic one: its FP8 share is Hopper's fit, not the
    full FP8 peak."""
    assert Calibration().fp8_efficiency == DEFAULT_CALIBRATION["hopper"].fp8_efficiency < 1


def test_every_row_left_out_says_why() -> None:
    reasons = [c for c in cases() if not isinstance(c, Case)]
    used = sum(isinstance(c, Case) for c in cases())
    assert used >= 200 and all(isinstance(r, str) and r for r in reasons)
    assert any("offload" in r for r in reasons)  # DeepSpeed's ZeRO-Offload rows (S15)
