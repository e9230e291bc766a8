"""What the model gets wrong, learned from measured configs (study/search/_model_errors.py)."""

import numpy as np

from autotune.study.search._model_errors import OWN_SPREADS, Shared, believe, widened

VALUES = 0.08**2 * 4
"""Prior variance of the knob values' errors of configs that share all four of theirs."""


def alike(rows: int, columns: int) -> Shared:
    """Configs that share every knob value, each one move from every other."""
    moves = np.ones((rows, columns), dtype=np.int64)
    return Shared(np.full((rows, columns), VALUES), moves)


def spread_after(errors: np.ndarray) -> float:
    """The spread of an unmeasured config like the measured ones, whose errors are `errors`."""
    n = len(errors)
    between = Shared(np.full((n, n), VALUES), 1 - np.eye(n, dtype=np.int64))
    return float(believe(alike(1, n), between, errors, VALUES).spread[0])


def test_errors_no_two_configs_share_keep_each_configs_own_spread() -> None:
    """Twenty configs alike in every knob value, each wrong by its own 10% (seeded): the
    likeliest own spread is the largest, and an unmeasured config like them stays that
    uncertain however many are measured."""
    errors = np.random.default_rng(0).normal(0.0, 0.10, 20)
    assert spread_after(errors) >= OWN_SPREADS[-1]


def test_a_model_that_keeps_being_right_grows_surer_down_to_a_configs_own_error() -> None:
    """Twenty configs each within 0.1% of the model: an unmeasured one like them is surer
    than the prior, yet no surer than the smallest own spread."""
    errors = np.random.default_rng(0).normal(0.0, 0.001, 20)
    prior = float(believe(alike(1, 0), alike(0, 0), np.zeros(0), VALUES).spread[0])
    assert OWN_SPREADS[0] <= spread_after(errors) < prior / 2


STAGES = np.array([[z, m] for z in (1, 2, 3) for m in (0, 1)])
"""Six measured configs as codes of two knobs: a ZeRO stage (1-3) and a micro-batch (0-1)."""
TWO_KNOBS = np.array([0.08**2, 0.08**2])


def test_one_value_far_off_the_model_widens_alone() -> None:
    """ZeRO 3's configs run at a third of their prediction, the others as predicted: ZeRO 3's
    spread widens, and no other value's, so its error is not lent to the micro-batches its
    configs share with the others."""
    errors = np.where(STAGES[:, 0] == 3, -1.1, 0.0) + np.array([0.01, -0.02, 0.02, 0.0, 0, 0])
    assert widened(STAGES, TWO_KNOBS, np.array([True, True]), np.zeros((6, 6)), errors) == {(0, 3)}


def test_errors_drawn_from_their_prior_seldom_widen_a_value() -> None:
    """Forty configs over eight two-valued structural knobs, their errors drawn from the
    prior (a 5% level, 8% per knob value, 4% of their own; seeded, 100 draws): with sixteen
    values to try, the likeliest gains by chance, yet a value widens in at most one draw in
    ten."""
    rng = np.random.default_rng(0)
    widening = 0
    for _ in range(100):
        codes = rng.integers(0, 2, size=(40, 8))
        by_value = rng.normal(0.0, 0.08, size=(8, 2))[np.arange(8), codes].sum(axis=1)
        errors = by_value + rng.normal(0.0, 0.05) + rng.normal(0.0, 0.04, 40)
        knobs = np.full(8, 0.08**2)
        widening += bool(widened(codes, knobs, np.ones(8, bool), np.zeros((40, 40)), errors))
    assert widening <= 10
