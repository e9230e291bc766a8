"""What a worker is told to run (`trial.json`) and what it reports back (`result.json`).

The trial-to-tuner contract is these files, not exit codes or log greps.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import TypeAdapter

from autotune.space import TrainConfig
from autotune.specs import Cluster, Workload

Outcome = Literal[
    "ok",
    "oom",
    "timeout",
    "comm_error",
    "launch_error",
    "crash",
    "pruned",
    "cancelled",
    "node_fail",
    "preempted",
]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
"""`pruned`: stopped early because it was clearly slower than the best so far. The last three
come from a scheduler: cancelled outside autotune, a node failed, preempted (each retried
once where that can help)."""

NCCL_TUNED = ("NCCL_ALGO", "NCCL_PROTO")
"""NCCL variables a trial sets from its config, and no one else: launchers drop inherited ones."""
FAULT_ENV = "AUTOTUNE_INJECT_FAULT"
"""Test hook: `hang`, `crash` or `oom` makes rank 0 misbehave at its first step; `nccl_env`
gives rank 1 an NCCL setting of its own."""
LAUNCH_EPOCH_ENV = "AUTOTUNE_LAUNCH_EPOCH"
"""Set by launchers: wall-clock time the launch began, to split trial overhead into phases."""

TRIAL_FILE = "trial.json"
RESULT_FILE = "result.json"
METRICS_FILE = "metrics.jsonl"


@dataclass(frozen=True, kw_only=True)
class StepPlan:
    """How long a trial runs: warm-up until step time settles (capped), then measured steps.

    Longer trials cost time but shrink the spread; see README, "Trial length and noise".
    """

    min_warmup: int = 3
    max_warmup: int = 12
    settle_window: int = 3
    settle_tolerance: float = 0.10
    """Warm-up ends when the last `settle_window` steps lie within this fraction of the median."""
    measured_steps: int = 8
    profile: bool = True
    """Profile one extra step with torch.profiler to split communication from computation."""


@dataclass(frozen=True, kw_only=True)
class TrialSpec:
    engine: str
    workload: Workload
    cluster: Cluster
    config: TrainConfig
    steps: StepPlan = field(default_factory=StepPlan)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TrialSpec:
        return TypeAdapter(cls).validate_json(text)


def nccl_environment(spec: TrialSpec) -> dict[str, str]:
    """NCCL_ALGO / NCCL_PROTO for the config's choices; nothing for NCCL's default."""
    chosen = dict(zip(NCCL_TUNED, (spec.config.nccl_algo, spec.config.nccl_proto), strict=True))
    return {name: value for name, value in chosen.items() if value != "default"}


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from a file the worker wrote, or None when absent or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
