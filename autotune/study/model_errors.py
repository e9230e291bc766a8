"""What the step-time model gets wrong, learned from the measured configs.

The error of a config, log(measured / predicted tokens/s), is a Gaussian process whose
covariance between two configs is a sum of errors they share:

- the model's level, shared by all (`LEVEL_SPREAD`);
- each knob value's own error, shared by every config with that value (a TP degree whose
  collectives run slower than modelled, full recomputation cheaper than its FLOPs): the
  `STRUCTURAL` knobs' values by `STRUCTURAL_SPREAD`, the others' by `MINOR_SPREAD`;
- each parallel layout's error (`PARALLEL`: how the model is split across GPUs, which sets
  every collective and the pipeline's schedule), shared by every config with that split
  whatever its sharding, recomputation or micro-batch (`PARALLEL_SPREAD`);
- each layout's own error, shared with its neighbours and halving per move between them
  (`LAYOUT_SPREAD`, `KEPT_PER_MOVE`; a move: one knob a user changes, with data parallelism
  following from the others);
- each config's own error, shared with none (one of `OWN_SPREADS`, the likeliest), and a
  measurement's noise.

The posterior shrinks a value's error only where configs with that value were measured, so
a value never run keeps its prior, which proposals weigh. The shared errors' spread is
scaled by how large the errors measured so far are against the covariance, with a prior of
`PRIOR_WEIGHT` trials at scale 1: a model that keeps being right grows surer everywhere,
down to a config's own error, which no other config's measurement tells.
"""

from __future__ import annotations

import math
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
PARALLEL = ("tp", "pp", "vpp", "cp", "ep", "etp")
"""The knobs that split the model across GPUs: together, a config's parallel layout."""
PARALLEL_SPREAD = 0.10
"""Prior spread of one parallel layout's error."""
LAYOUT_SPREAD = 0.06
"""Prior spread of one layout's own error."""
KEPT_PER_MOVE = 0.5
"""Share of a layout's own error a neighbour one move away shares (squared for two...)."""
OWN_SPREADS = (0.03, 0.06, 0.10)
"""Spreads one config's own error (shared with no other config) may have: the one under
which the measured errors are likeliest is used, so a model wrong config by config, not by
class, stops lending one config's measurement to its neighbours."""
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
    count = len(errors)
    if not count:
        n = to_measured.moves.shape[0]
        prior = LEVEL_SPREAD**2 + values + LAYOUT_SPREAD**2 + OWN_SPREADS[0] ** 2
        return Beliefs(np.zeros(n), np.full(n, np.sqrt(prior)))
    shared = between.covariance()
    fits = [_Fit.of(shared, errors, own) for own in OWN_SPREADS]
    best = max(fits, key=lambda f: f.likelihood)
    prior = LEVEL_SPREAD**2 + values + LAYOUT_SPREAD**2 + best.own**2
    projected = linalg.solve_triangular(best.lower, to_measured.covariance().T, lower=True)
    mean = projected.T @ best.whitened
    variance = np.maximum(prior - np.einsum("ij,ij->j", projected, projected), best.own**2)
    # The scale learns how far the shared errors reach; a config's own error is not shared,
    # so no measurement of another config makes it smaller.
    return Beliefs(mean, np.sqrt(best.scale * (variance - best.own**2) + best.own**2))


@dataclass(frozen=True)
class _Fit:
    """The measured errors under one own spread: the covariance's Cholesky factor, the
    whitened errors, the covariance's scale and the log likelihood at that scale."""

    own: float
    lower: np.ndarray
    whitened: np.ndarray
    scale: float
    likelihood: float

    @classmethod
    def of(cls, shared: np.ndarray, errors: np.ndarray, own: float) -> _Fit:
        count = len(errors)
        k = shared + (own**2 + NOISE_SPREAD**2) * np.eye(count)
        lower = linalg.cholesky(k, lower=True)
        whitened = linalg.solve_triangular(lower, errors, lower=True)
        square = float(whitened @ whitened)
        scale = (PRIOR_WEIGHT + square) / (PRIOR_WEIGHT + count)
        log_det = 2 * float(np.log(np.diag(lower)).sum()) + count * math.log(scale)
        return cls(own, lower, whitened, scale, -0.5 * (log_det + square / scale))
