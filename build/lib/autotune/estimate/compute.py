"""How fast a rank's GEMMs run: a calibrated share of the device's peak (its FP8 peak for FP8
GEMMs) that grows with a GEMM's narrow side (h/tp, or a routed expert's width over etp) and
its long side (tokens per micro-batch)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.estimate.calibration import Calibration
from autotune.space.table import ConfigTable
from autotune.specs import Cluster, Workload


def peak_flops(w: Workload, cluster: Cluster) -> float:
    """The device's peak at the workload's precision (else its best but FP8's)."""
    peaks = cluster.device.peak_flops
    return peaks.get(w.precision) or max(v for k, v in peaks.items() if k != "fp8")


def fp8_peak_flops(w: Workload, cluster: Cluster) -> float | None:
    """The device's FP8 peak where the workload trains in FP8 (None otherwise)."""
    if w.fp8 == "none":
        return None
    if "fp8" not in cluster.device.peak_flops:
        raise ValueError(f"fp8 {w.fp8}: {cluster.device.name} has no FP8 peak")
    return cluster.device.peak_flops["fp8"]


def gemm_rate(peak: float, width: np.ndarray, tokens: np.ndarray, cal: Calibration) -> np.ndarray:
    """FLOP/s a GEMM `width` wide (h/tp) over `tokens` rows reaches."""
    return (
        peak
        * cal.compute_efficiency
        * width_share(width, cal)
        * tokens
        / (tokens + cal.tokens_half)
    )


def width_share(width: np.ndarray, cal: Calibration) -> np.ndarray:
    """Of the rate large GEMMs reach, the share one whose narrow side is `width` reaches."""
    return width / (width + cal.gemm_half_size)


def achievable_flops(
    w: Workload, c: ConfigTable, cluster: Cluster, cal: Calibration
) -> np.ndarray:
    return gemm_rate(
        peak_flops(w, cluster), w.hidden_size / c.tp, c.mbs * w.seq_length / c.cp, cal
    )


@dataclass(frozen=True)
class GemmRates:
    """Each config's GEMM rates under one calibration, and the seconds FLOPs take at them."""

    rate: np.ndarray
    """At the workload's precision and h/tp wide."""
    fp8: np.ndarray | None
    """FP8 GEMMs' (None without FP8)."""
    expert_slowdown: np.ndarray
    """How much slower than an h/tp-wide GEMM a routed expert's (narrower) one runs."""
    moe: bool

    @classmethod
    def at(
        cls,
        cal: Calibration,
        peak: float,
        fp8_peak: float | None,
        width: np.ndarray,
        expert_width: np.ndarray,
        tokens: np.ndarray,
        moe: bool,
    ) -> GemmRates:
        rate = gemm_rate(peak, width, tokens, cal)
        fp8 = (
            gemm_rate(fp8_peak * cal.fp8_efficiency, width, tokens, cal)
            if fp8_peak is not None
            else None
        )
        slowdown = width_share(width, cal) / width_share(expert_width, cal)
        return cls(rate, fp8, slowdown, moe)

    @property
    def linear(self) -> np.ndarray:
        """Linear layers' GEMMs' rate: FP8's with FP8."""
        return self.rate if self.fp8 is None else self.fp8

    def seconds(self, flops: np.ndarray, in_fp8: np.ndarray, experts: np.ndarray) -> np.ndarray:
        """Seconds of `flops`, of which `in_fp8` in FP8 GEMMs and `experts` in routed experts'
        GEMMs (in FP8 with FP8, as linear layers), which run at their own width."""
        at_width = (
            flops / self.rate
            if self.fp8 is None
            else (flops - in_fp8) / self.rate + in_fp8 / self.fp8
        )
        if not self.moe:
            return at_width
        return at_width + experts / self.linear * (self.expert_slowdown - 1)
