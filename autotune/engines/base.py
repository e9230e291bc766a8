"""What every training engine provides to the tuner. Pure: no torch, no engine imports."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from autotune.space import GENERIC_RULES, Rule
from autotune.specs import Cluster
from autotune.trialspec import TrialSpec

NCCL_KNOBS = frozenset({"nccl_algo", "nccl_proto"})


class Engine(ABC):
    """A training engine: its rules, its own config files, and the worker torchrun starts."""

    name: ClassVar[str]
    knobs: ClassVar[frozenset[str]]
    """Knobs this engine reads; a space file may vary only these."""
    engine_rules: ClassVar[tuple[Rule, ...]] = ()

    @property
    def rules(self) -> tuple[Rule, ...]:
        return GENERIC_RULES + self.engine_rules

    job_worker: ClassVar[str | None] = None
    """The module that runs a user's own training command with this engine's measuring hook
    (`autotune run -- CMD`); None where the engine cannot tune one."""
    job_reads_config_file: ClassVar[bool] = False
    """A user's command names this engine's config file, which trials replace (DeepSpeed's
    ds_config); else it reads the trial's knobs through `autotune.step`."""

    @property
    def worker_module(self) -> str:
        return f"autotune.engines.{self.name}_worker"

    def worker(self, spec: TrialSpec) -> str:
        """The module torchrun starts for this trial: the hook around the user's command,
        or autotune's own worker."""
        if spec.job is not None and self.job_worker is not None:
            return self.job_worker
        return self.worker_module

    def environment(self, cluster: Cluster) -> dict[str, str]:
        """Variables every rank of a trial needs, besides the NCCL knobs."""
        return {}

    def check_runnable(self, cluster: Cluster) -> None:
        """Raise InputError when this engine's trials cannot run for real on this cluster
        from this machine (planning and simulation still can)."""
        return None

    @abstractmethod
    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        """Write the engine's own config files for this trial; return their paths."""
