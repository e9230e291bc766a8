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
a value never run keeps its prior, which proposals weigh. A structural value whose measured
errors lie far beyond its prior gets `WIDE` times its spread (`widened`), so that a
Gaussian prior does not spread one class's large error over the values its configs share.
The shared errors' spread is scaled by how large the errors measured so far are against
the covariance, with a prior of `PRIOR_WEIGHT` trials at scale 1: a model that keeps being
right grows surer everywhere, down to a config's own error, which no other config's
measurement tells.
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
WIDE = 4.0
"""A knob value whose measured configs stray from the model far beyond its prior spread
(ZeRO 3 on two CPU processes runs at a third of its prediction) gets a spread this many
times its prior: its error is then its own, not lent to the values its configs share with
others (a Gaussian prior would spread it over them all)."""
WIDEN_EVIDENCE = 2.0
"""How much likelier (in log) the measured errors must be for a value's spread to widen,
beyond what the likeliest of the values tried gains by chance."""
WIDE_FROM = 2.0
"""A value is tried for widening only where its configs' mean error is this many prior
spreads from the other configs'."""


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


def believe(
    to_measured: Shared, between: Shared, errors: np.ndarray, values: np.ndarray | float
) -> Beliefs:
    """The posterior error of each candidate (rows of `to_measured`; its columns and
    `between` are the measured configs, `errors` theirs); `values`: the prior variance of
    all of a candidate's knob values' errors."""
    count = len(errors)
    if not count:
        n = to_measured.moves.shape[0]
        prior = LEVEL_SPREAD**2 + values + LAYOUT_SPREAD**2 + OWN_SPREADS[0] ** 2
        return Beliefs(np.zeros(n), np.broadcast_to(np.sqrt(prior), n).copy())
    best = _likeliest(between.covariance(), errors)
    prior = LEVEL_SPREAD**2 + values + LAYOUT_SPREAD**2 + best.own**2
    projected = linalg.solve_triangular(best.lower, to_measured.covariance().T, lower=True)
    mean = projected.T @ best.whitened
    variance = np.maximum(prior - np.einsum("ij,ij->j", projected, projected), best.own**2)
    # The scale learns how far the shared errors reach; a config's own error is not shared,
    # so no measurement of another config makes it smaller.
    return Beliefs(mean, np.sqrt(best.scale * (variance - best.own**2) + best.own**2))


def widened(
    codes: np.ndarray,
    variances: np.ndarray,
    eligible: np.ndarray,
    split: np.ndarray,
    errors: np.ndarray,
) -> frozenset[tuple[int, int]]:
    """The knob values whose spread widens by `WIDE`, as (knob column, code) pairs: of the
    `eligible` knobs' values that tell measured configs apart, those whose configs' mean
    error lies beyond `WIDE_FROM` prior spreads of the others', taken greedily while each
    makes the measured errors likelier by `WIDEN_EVIDENCE` plus the log of how many values
    there were (the likeliest of many gains by chance alone). `codes`: the measured configs'
    knob codes (a row each); `variances`: each knob's prior value variance; `split`: the
    parallel layouts' covariance between them."""
    candidates = [
        (int(k), int(c))
        for k in np.flatnonzero(eligible)
        if len(found := np.unique(codes[:, k])) > 1
        for c in found
    ]
    open_ = {
        (k, c)
        for k, c in candidates
        if abs(errors[codes[:, k] == c].mean() - errors[codes[:, k] != c].mean())
        > WIDE_FROM * math.sqrt(variances[k])
    }
    if not open_:
        return frozenset()
    chance = math.log(len(candidates))

    def likelihood(wide: frozenset[tuple[int, int]]) -> float:
        between = measured_between(codes, value_variances(codes, variances, wide), split)
        return _likeliest(between.covariance(), errors).likelihood

    wide: frozenset[tuple[int, int]] = frozenset()
    best = likelihood(wide)
    while open_:
        gains = {value: likelihood(wide | {value}) for value in open_}
        pick = max(sorted(gains), key=gains.__getitem__)
        if gains[pick] < best + WIDEN_EVIDENCE + chance:
            break
        wide, best = wide | {pick}, gains[pick]
        open_.discard(pick)
    return wide


def measured_between(codes: np.ndarray, own_values: np.ndarray, split: np.ndarray) -> Shared:
    """What the measured configs (rows of `codes`) share with each other: the prior
    variances of the knob values a pair has in common (`own_values`: per config and knob,
    as `value_variances` gives them) plus their parallel layouts' covariance (`split`),
    and how many knob values the pair differs in."""
    same = codes[:, None, :] == codes[None, :, :]
    return Shared((same * own_values[None, :, :]).sum(axis=2) + split, (~same).sum(axis=2))


def value_variances(
    codes: np.ndarray, variances: np.ndarray, wide: frozenset[tuple[int, int]]
) -> np.ndarray:
    """Per config (rows of `codes`), the prior variance of each of its knob values' errors:
    the knob's, `WIDE`² times for a widened value."""
    out = np.broadcast_to(variances, codes.shape).astype(np.float64)
    for k, code in wide:
        out[codes[:, k] == code, k] *= WIDE**2
    return out


def _likeliest(shared: np.ndarray, errors: np.ndarray) -> _Fit:
    """The measured errors' fit under the likeliest of `OWN_SPREADS`."""
    return max((_Fit.of(shared, errors, own) for own in OWN_SPREADS), key=lambda f: f.likelihood)


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
