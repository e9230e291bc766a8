"""What a trial that ran reports, as one frozen type: a worker writes it to result.json, the
simulate and replay launchers make it from the model or a recorded sweep, launchers return
it, the study keeps its figures as trial attributes, and the report and display read it."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from autotune.trial.spec import RESULT_FILE, read_json, write_atomically

Source = Literal["measured", "simulated", "replayed"]
STUDY_FIGURES = (
    "step_time_s",
    "step_time_stdev_s",
    "tokens_per_s",
    "tflops_per_device",
    "mfu",
    "peak_memory_bytes",
    "model_state_bytes",
    "profile",
    "warmup_steps",
    "measured_steps",
    "stopped_for",
    "interval",
    "nccl_version",
    "phases_s",
    "losses",
)
"""The figures the study keeps on each trial (user attributes), for the table and report."""


@dataclass(frozen=True, kw_only=True)
class TrialResult:
    source: Source
    step_time_s: float
    """The median step time of the slowest rank (measured), or the prediction."""
    tokens_per_s: float
    tflops_per_device: float
    mfu: float | None
    step_time_stdev_s: float = 0.0
    step_time_min_s: float | None = None
    step_time_max_s: float | None = None
    step_times_s: tuple[float, ...] = ()
    flop_formula: str | None = None
    peak_memory_bytes: float | None = None
    peak_memory_kind: str | None = None
    """How the peak was read: max_memory_allocated, max_rss, a framework's log, ..."""
    model_state_bytes: float | None = None
    model_state_bytes_per_rank: tuple[int, ...] = ()
    model_state_breakdown_rank0: dict[str, int] = field(default_factory=dict, hash=False)
    profile: dict[str, float] | None = field(default=None, hash=False)
    """The profiled step split into time in collectives and the rest."""
    warmup_steps: int = 0
    measured_steps: int = 0
    stopped_for: str | None = None
    """Why measuring stopped (`trial.length`): precise, slower (than the step time to beat)
    or cap; None on a simulated or replayed result, or a fixed-length one."""
    interval: float | None = None
    """Half the 95% interval of the mean step time, as a share of the median."""
    world_size: int | None = None
    nodes: int | None = None
    """The nodes the trial ran on (a slice's, in a slice study), set by the tuner."""
    ran_on: str | None = None
    """Their names: the host, or SLURM's node list; set by the tuner once it ended."""
    phases_s: dict[str, float] = field(default_factory=dict, hash=False)
    """Wall time of the trial's phases: launch, imports, initialisation, warm-up, ..."""
    versions: dict[str, str] = field(default_factory=dict, hash=False)
    nccl_version: str | None = None
    predicted: dict[str, Any] | None = field(default=None, hash=False)
    """The model's breakdown, on a simulated result."""
    replayed_at: float | None = None
    model_shape: dict[str, Any] | None = field(default=None, hash=False)
    """The user's model as a DeepSpeed job's hook read it (`engines.model_shape`)."""
    losses: tuple[float, ...] = ()
    node_compute_s: dict[str, float] = field(default_factory=dict, hash=False)
    """Each node's compute time in the profiled step (outside collectives), by its slowest
    rank, where the trial spans nodes: what shows a slow node (`nodes.judge.slow_in_trial`)."""
    """The loss of each optimizer step from the first, averaged over its micro-batches and
    the ranks (`rank/loss.py`); () where the job does not tell it (loss parity)."""

    def figures(self) -> dict[str, Any]:
        """What the study keeps of it (`STUDY_FIGURES`)."""
        return {name: getattr(self, name) for name in STUDY_FIGURES}

    def as_dict(self) -> dict[str, Any]:
        """result.json's content: `status: ok` and every field."""
        return {"status": "ok", **dataclasses.asdict(self)}

    def write(self, folder: Path) -> None:
        write_atomically(folder / RESULT_FILE, json.dumps(self.as_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, folder: Path) -> TrialResult | None:
        """The trial's result.json when it says `ok`; fields a newer writer added are
        ignored, so old and new trial folders both read."""
        data = read_json(folder / RESULT_FILE)
        if not data or data.get("status") != "ok":
            return None
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("step_times_s", "model_state_bytes_per_rank", "losses"):
            if name in values:
                values[name] = tuple(values[name] or ())
        values.setdefault("source", "measured")
        try:
            return cls(**values)
        except TypeError:  # a figure missing: not a result autotune can use
            return None
