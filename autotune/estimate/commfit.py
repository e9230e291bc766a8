"""Collective times fitted to `autotune commbench` measurements.

For each collective, link (`intra`: a group inside one node; `inter`: one spanning nodes) and
NCCL setting, commbench's times over message sizes are fitted to t = latency + B / busbw, with
B the bytes nccl-tests counts on the bus (size x bus factor). Where a cluster has such a fit,
the step-time model uses it instead of NCCL's constants (or the host link's guess on gloo):
measured on the fabric beats a table. A fit made on one group size serves other sizes of the
same link: busbw is defined to be comparable across sizes, and the ring's latency grows with
its n-1 steps.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import nnls

from autotune.errors import InputError
from autotune.estimate.collectives import Op, bus_factor, nccl_bytes

MIN_SIZES = 3
"""Sizes a (collective, link, setting) needs before a latency and a bandwidth are fitted."""


@dataclass(frozen=True)
class CollectiveFit:
    op: str
    link: str
    """`intra` (one node) or `inter` (across nodes)."""
    ranks: int
    algo: str
    proto: str
    latency_s: float
    busbw_bytes_per_s: float
    median_error: float
    """Median relative error of the fit over the sizes it was fitted to."""

    def seconds(self, op: Op, per_rank_bytes: float, ranks: int) -> float:
        steps = (ranks - 1) / (self.ranks - 1)
        moved = nccl_bytes(op, per_rank_bytes, ranks) * bus_factor(op, ranks)
        return self.latency_s * steps + moved / self.busbw_bytes_per_s


def link_of(nodes: int) -> str:
    return "intra" if nodes == 1 else "inter"


def matching_fit(
    fits: Iterable[CollectiveFit], op: str, nodes: int, ranks: int, algo: str, proto: str
) -> CollectiveFit | None:
    """The fit for this collective, link and NCCL setting; of several, the nearest in size."""
    link = link_of(nodes)
    candidates = [f for f in fits if (f.op, f.link, f.algo, f.proto) == (op, link, algo, proto)]
    return min(candidates, key=lambda f: abs(f.ranks - ranks), default=None)


def _fit_one(bus_bytes: np.ndarray, times: np.ndarray) -> tuple[float, float, float]:
    """(latency s, seconds per bus byte, median relative error): non-negative least squares
    on relative error, so small and large messages weigh alike."""
    design = np.column_stack([np.ones_like(bus_bytes), bus_bytes]) / times[:, None]
    (latency, per_byte), _ = nnls(design, np.ones_like(times))
    predicted = latency + per_byte * bus_bytes
    error = statistics.median(np.abs(predicted / times - 1).tolist())
    return float(latency), float(per_byte), error


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
    keys = sorted({(r["op"], r["nodes"], r["ranks"], r["algo"], r["proto"]) for r in rows})
    fits = []
    for op, nodes, ranks, algo, proto in keys:
        same = [
            r
            for r in rows
            if (r["op"], r["nodes"], r["ranks"], r["algo"], r["proto"])
            == (op, nodes, ranks, algo, proto)
        ]
        if len(same) < MIN_SIZES:
            continue
        bus = np.array([r["bytes"] * bus_factor(op, ranks) for r in same], dtype=float)
        times = np.array([r["time_s"] for r in same], dtype=float)
        latency, per_byte, error = _fit_one(bus, times)
        if per_byte <= 0:
            continue  # time did not grow with size: no bandwidth to learn
        fits.append(
            CollectiveFit(op, link_of(nodes), ranks, algo, proto, latency, 1 / per_byte, error)
        )
    return fits


def require_fits(fits: Sequence[CollectiveFit], source: str) -> Sequence[CollectiveFit]:
    if not fits:
        raise InputError(
            f"{source}: no collective over two or more ranks with {MIN_SIZES}+ correct sizes "
            "to fit (a one-rank commbench crosses no link)"
        )
    return fits
