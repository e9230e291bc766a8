"""What every training engine provides to the tuner. Pure: no torch, no engine imports."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from autotune.estimate.traits import EngineTraits
from autotune.space import GENERIC_RULES, Rule
from autotune.space.rules import pipeline_rule
from autotune.specs import Cluster
from autotune.trial.spec import JobFramework, PoolKind, TrialSpec

NCCL_KNOBS = frozenset({"nccl_algo", "nccl_proto"})
NCCL_MEANINGS = {
    "nccl_algo": "NCCL_ALGO for every rank (default: unset, NCCL chooses)",
    "nccl_proto": "NCCL_PROTO for every rank (default: unset, NCCL chooses)",
}
RECOMPUTE_MEANING = (
    "activation recomputation: none; selective (the attention core, Korthikanti et al.); "
    "full (each transformer block)"
)
JOB_WORKERS: dict[JobFramework, str] = {
    "deepspeed": "autotune.engines.deepspeed_job_worker",
    "script": "autotune.engines.script_job_worker",
    "megatron": "autotune.engines.log_job_worker",
    "torchtitan": "autotune.engines.log_job_worker",
}
"""The module torchrun starts on each rank of a trial of a user's command (`autotune run --
CMD`): a hook around DeepSpeed's step, the `autotune.step` helper, or the reader of
Megatron-LM's and torchtitan's own log lines."""
FORKED_FRAMEWORKS: frozenset[JobFramework] = frozenset({"deepspeed", "script"})
"""The frameworks whose commands run forked from a pool rank that imported their job worker
(`engines/fork_pool_worker.py`); Megatron-LM and torchtitan need CUDA for their trials."""


class Engine(ABC):
    """A training engine. A new one declares, in its own module under engines/: `name`,
    `knobs`, `engine_rules`, `traits` (what estimate/ and export/ read), `worker_module` (its
    worker, run on every rank) and `knob_meanings`; implements `write_files`; is added to
    `ENGINES` in engines/__init__.py; and has a search space in search_spaces/<name>.yaml.
    tests/unit/test_engine_contract.py then runs it."""

    name: ClassVar[str]
    knobs: ClassVar[frozenset[str]]
    """Knobs this engine reads; a space file may vary only these."""
    engine_rules: ClassVar[tuple[Rule, ...]] = ()
    traits: ClassVar[EngineTraits]
    """What estimate/ and export/ read of this engine (estimate/traits.py)."""
    worker_module: ClassVar[str]
    """The module torchrun starts on each rank of autotune's own trials of this engine."""
    warm_pool: ClassVar[bool] = False
    """Its worker module has a `SESSION` that a warm pool's ranks build trial after trial
    (engines/pool_worker.py): set only where building an engine twice in one process is
    shown to leave no state behind (tests/integration/test_warm_pool.py)."""
    knob_meanings: ClassVar[dict[str, str]] = {}
    """Each knob in this engine's own words and units (its config keys or flags): `zero=1`
    or a bucket size means different things to DeepSpeed, Megatron-LM and PyTorch."""

    @property
    def rules(self) -> tuple[Rule, ...]:
        return GENERIC_RULES + (pipeline_rule(self.traits.pipeline_split),) + self.engine_rules

    def worker(self, spec: TrialSpec) -> str:
        """The module torchrun starts for this trial: the hook around the user's command,
        or autotune's own worker."""
        if spec.job is not None:
            return JOB_WORKERS[spec.job.framework]
        return self.worker_module

    def pool_for(self, spec: TrialSpec) -> PoolKind | None:
        """The pool this trial may run in: a warm one for autotune's own worker, of an
        engine shown to leave no state behind between trials; a forked one for a user's
        command whose job worker runs it in its own interpreter, on gloo (a fork is safe
        only before a device context exists, and no GPU here has shown it safe)."""
        if spec.job is None:
            return "warm" if self.warm_pool else None
        if spec.job.framework in FORKED_FRAMEWORKS and spec.cluster.backend == "gloo":
            return "forked"
        return None

    def environment(self, cluster: Cluster) -> dict[str, str]:
        """Variables every rank of a trial needs, besides the NCCL knobs."""
        return {}

    def script_hint(self, spec: TrialSpec) -> str:
        """How a user's own training script takes this config (train.sh says it)."""
        return self.traits.script_hint

    def check_runnable(self, cluster: Cluster) -> None:
        """Raise InputError when this engine's trials cannot run for real on this cluster
        from this machine (planning and simulation still can)."""
        return None

    @abstractmethod
    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        """Write the engine's own config files for this trial; return their paths."""
