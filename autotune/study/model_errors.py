"""What the step-time model gets wrong, learned from the measured configs.

The error of a config, log(measured / predicted tokens/s), is a Gaussian process whose
covariance between two configs is a sum of errors they share:

- the model's level, shared by all (`LEVEL_SPREAD`);
- each knob value's own error, shared by every config with that value (a TP degree whose
  collectives run slower than modelled, full recomputation cheaper than its FLOPs): the
  `STRUCTURAL` knobs' values by `STRUCTURAL_SPREAD`, the others' by `MINOR_SPREAD`;
- each layout's own error, shared with its neighbours and halving per move between them
  (`LAYOUT_SPREAD`, `KEPT_PER_MOVE`; a move: one knob a user changes, with data parallelism
  following from the others);
- each config's own error, shared with none (`OWN_SPREAD`), and a measurement's noise.

The posterior shrinks a value's error only where configs with that value were measured, so
a value never run keeps its prior, which proposals weigh. The whole covariance is scaled by
how large the errors measured so far are against it, with a prior of `PRIOR_WEIGHT` trials
at scale 1: a model that keeps being right grows surer everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg

LEVEL_SPREAD = 0.05
"""Prior spread of the error every config shares, in log throughput."""
STRUCTURAL = frozenset(
    {"tp", "pp", "vpp", "cp", "ep", "etp", "zero", "hsdp", "recompute", "sp", "moe_dispatcher"}
    | {"overlap_comm", "overlap_param_gather", "tp_comm_overlap", "ep_comm_overlap"}
    | {"offload_optimizer", "offload_param"}
)
"""Knobs whose values change how the step runs, not only how much: their errors are large."""
STRUCTURAL_SPREAD = 0.08
MINOR_SPREAD = 0.02
"""Prior spread of one value's error, of a structural knob and of any other."""
LAYOUT_SPREAD = 0.06
"""Prior spread of one layout's own error."""
KEPT_PER_MOVE = 0.5
"""Share of a layout's own error a neighbour one move away shares (squared for two...)."""
OWN_SPREAD = 0.03
"""Prior spread of one config's own error, shared with no other config."""
NOISE_SPREAD = 0.03
"""A measurement's own spread: a few percent between launches of one config."""
PRIOR_WEIGHT = 3
"""The prior scale counts as this many measured configs when the scale is estimated."""


def value_spread(knob: str) -> float:
    """Prior spread of the error of one of this knob's values."""
    return STRUCTURAL_SPREAD if knob in STRUCTURAL else MINOR_SPREAD


@dataclass(frozen=True)
class Shared:
    """Between configs: the prior variance of the knob values' errors they share, and the
    moves between them."""

    values: np.ndarray
    moves: np.ndarray

    def covariance(self) -> np.ndarray:
        near = LAYOUT_SPREAD**2 * KEPT_PER_MOVE ** self.moves.astype(np.float64)
        return LEVEL_SPREAD**2 + self.values + near


@dataclass(frozen=True)
class Beliefs:
    """Per candidate: the expected error and its spread."""

    mean: np.ndarray
    spread: np.ndarray


def believe(to_measured: Shared, between: Shared, errors: np.ndarray, values: float) -> Beliefs:
    """The posterior error of each candidate (rows of `to_measured`; its columns and
    `between` are the measured configs, `errors` theirs); `values`: the prior variance of
    all of a config's knob values' errors."""
    prior = LEVEL_SPREAD**2 + values + LAYOUT_SPREAD**2 + OWN_SPREAD**2
    count = len(errors)
    if not count:
        n = to_measured.moves.shape[0]
        return Beliefs(np.zeros(n), np.full(n, np.sqrt(prior)))
    unshared = OWN_SPREAD**2 + NOISE_SPREAD**2
    k = between.covariance() + unshared * np.eye(count)
    lower = linalg.cholesky(k, lower=True)
    whitened = linalg.solve_triangular(lower, errors, lower=True)
    scale = (PRIOR_WEIGHT + float(whitened @ whitened)) / (PRIOR_WEIGHT + count)
    projected = linalg.solve_triangular(lower, to_measured.covariance().T, lower=True)
    mean = projected.T @ whitened
    variance = np.maximum(prior - np.einsum("ij,ij->j", projected, projected), 0.0)
    return Beliefs(mean, np.sqrt(scale * variance))
