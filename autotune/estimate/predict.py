"""One prediction for one config: both breakdowns and the figures a trial would measure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.estimate.memory import MemoryBreakdown, memory_breakdown
from autotune.estimate.steptime import Calibration, StepTime, step_time
from autotune.space import TrainConfig
from autotune.specs import Cluster, Workload
from autotune.specs.throughput import throughput


@dataclass(frozen=True)
class Estimate:
    config: TrainConfig
    step: StepTime
    memory: MemoryBreakdown
    tokens_per_s: float
    tflops_per_device: float
    mfu: float | None
    fits: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.as_dict(),
            "source": "predicted",
            "step_time_s": self.step.total_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_device": self.tflops_per_device,
            "mfu": self.mfu,
            "fits": self.fits,
            "dominant": self.step.dominant(),
            "step": self.step.as_dict(),
            "memory": {
                "total_bytes": self.memory.total,
                **{f"{k}_bytes": v for k, v in self.memory.as_dict().items() if k != "total"},
            },
        }


def estimate(
    w: Workload,
    config: TrainConfig,
    cluster: Cluster,
    engine: str,
    cal: Calibration | None = None,
    memory: MemoryBreakdown | None = None,
) -> Estimate:
    """Step time and memory of one config; `memory`, which no calibration changes, may come
    from an earlier estimate of the same config (a search re-predicts after every fit)."""
    step = step_time(w, config, cluster, engine, cal)
    memory = memory or memory_breakdown(w, config, engine, cluster.device.generation)
    rate = throughput(w, cluster, step.total_s)
    return Estimate(
        config=config,
        step=step,
        memory=memory,
        tokens_per_s=rate.tokens_per_s,
        tflops_per_device=rate.tflops_per_device,
        mfu=rate.mfu,
        fits=memory.total <= cluster.device.memory_bytes,
    )
