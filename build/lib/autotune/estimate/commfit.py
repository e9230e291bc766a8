"""Collective times fitted to `autotune commbench` measurements.

For each collective, link (`intra`: a group inside one node; `inter`: one spanning nodes) and
NCCL setting, commbench's times over message sizes are fitted to up to three regimes, each
t = latency + B / busbw with B the bytes nccl-tests counts on the bus (size x bus factor), and
a collective takes the fastest regime. That is the shape of NCCL's own model, which takes the
fastest of its protocols (LL for small messages, Simple for large), and of gloo's switch of
algorithm by size. Where a cluster has such a fit, the step-time model uses it instead of
NCCL's constants (or the host link's guess on gloo): measured on the fabric beats a table. A
fit made on one group size serves other sizes of the same link: busbw is defined to be
comparable across sizes, and the ring's latency grows with its n-1 steps.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.errors import InputError
from autotune.estimate.collectives import Op, bus_factor, nccl_bytes

MIN_SIZES = 3
"""Sizes a regime needs before its latency and bandwidth are fitted."""
MAX_REGIMES = 3
REGIME_GAIN = 0.5
"""A further regime is kept only if it at least halves the squared relative error."""


@dataclass(frozen=True)
class Regime:
    latency_s: float
    busbw_bytes_per_s: float


@dataclass(frozen=True)
class CollectiveFit:
    op: str
    link: str
    """`intra` (one node) or `inter` (across nodes)."""
    ranks: int
    algo: str
    proto: str
    regimes: tuple[Regime, ...]
    median_error: float
    """Median relative error of the fit over the sizes it was fitted to."""

    def seconds(self, per_rank_bytes: np.ndarray, ranks: int) -> np.ndarray:
        """The fastest regime's time for each of `per_rank_bytes` over `ranks` ranks."""
        steps = (ranks - 1) / (self.ranks - 1)
        op: Op = self.op  # type: ignore[assignment]
        moved = nccl_bytes(op, np.asarray(per_rank_bytes, dtype=float), ranks) * bus_factor(
            op, ranks
        )
        return np.minimum.reduce(
            [r.latency_s * steps + moved / r.busbw_bytes_per_s for r in self.regimes]
        )


def link_of(nodes: int) -> str:
    return "intra" if nodes == 1 else "inter"


def matching_fit(
    fits: Iterable[CollectiveFit], op: str, nodes: int, ranks: int, algo: str, proto: str
) -> CollectiveFit | None:
    """The fit for this collective, link and NCCL setting; of several, the nearest in size."""
    link = link_of(nodes)
    candidates = [f for f in fits if (f.op, f.link, f.algo, f.proto) == (op, link, algo, proto)]
    return min(candidates, key=lambda f: abs(f.ranks - ranks), default=None)


def _line(bus: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """(latency s, seconds per bus byte): non-negative least squares on relative error, so
    small and large messages weigh alike."""
    from scipy.optimize import nnls  # only a commbench fit needs scipy: plans start faster

    design = np.column_stack([np.ones_like(bus), bus]) / times[:, None]
    (latency, per_byte), _ = nnls(design, np.ones_like(times))
    return float(latency), float(per_byte)


def _fastest(lines: Sequence[tuple[float, float]], bus: np.ndarray) -> np.ndarray:
    return np.min([latency + per_byte * bus for latency, per_byte in lines], axis=0)


def _regimes(bus: np.ndarray, times: np.ndarray) -> list[tuple[float, float]]:
    """Up to MAX_REGIMES lines, each fitted to a run of consecutive sizes, predicting the
    fastest of them; a further regime only where it pays for itself (REGIME_GAIN)."""
    order = np.argsort(bus)
    bus, times = bus[order], times[order]
    best_lines, best_loss = None, np.inf
    for count in range(1, MAX_REGIMES + 1):
        cuts = range(MIN_SIZES, len(bus) - MIN_SIZES + 1)
        candidates = []
        for inner in itertools.combinations(cuts, count - 1):
            edges = (0, *inner, len(bus))
            if any(b - a < MIN_SIZES for a, b in itertools.pairwise(edges)):
                continue
            lines = [_line(bus[a:b], times[a:b]) for a, b in itertools.pairwise(edges)]
            loss = float(np.sum((_fastest(lines, bus) / times - 1) ** 2))
            candidates.append((loss, lines))
        if not candidates:
            break
        loss, lines = min(candidates, key=lambda c: c[0])
        if best_lines is not None and loss > best_loss * REGIME_GAIN:
            break
        best_lines, best_loss = lines, loss
    return best_lines or []


def fit_commbench(report: dict[str, Any]) -> list[CollectiveFit]:
    """One fit per (collective, link, group size, NCCL setting) with enough correct sizes.
    Point-to-point rows (all-to-all, send/recv) are not collectives the model times."""
    rows = [
        r
        for r in report.get("rows", [])
        if r.get("correct")
        and r["op"] in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
        and r["ranks"] > 1
    ]
    groups: dict[tuple[str, int, int, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["op"], r["nodes"], r["ranks"], r["algo"], r["proto"]), []).append(r)
    fits = []
    for (op, nodes, ranks, algo, proto), same in sorted(groups.items()):
        if len(same) < MIN_SIZES:
            continue
        bus = np.array([r["bytes"] * bus_factor(op, ranks) for r in same], dtype=float)
        times = np.array([r["time_s"] for r in same], dtype=float)
        lines = [(a, b) for a, b in _regimes(bus, times) if b > 0]
        if not lines:
            continue  # time never grew with size: no bandwidth to learn
        error = statistics.median(np.abs(_fastest(lines, bus) / times - 1).tolist())
        regimes = tuple(Regime(a, 1 / b) for a, b in lines)
        fits.append(CollectiveFit(op, link_of(nodes), ranks, algo, proto, regimes, error))
    return fits


def require_fits(fits: Sequence[CollectiveFit], source: str) -> Sequence[CollectiveFit]:
    if not fits:
        raise InputError(
            f"{source}: no collective over two or more ranks with {MIN_SIZES}+ correct sizes "
            "to fit (a one-rank commbench crosses no link)"
        )
    return fits
