"""What every training engine provides to the tuner. Pure: no torch, no engine imports."""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from autotune.engines.framework import Framework
from autotune.errors import InputError
from autotune.estimate.traits import EngineTraits
from autotune.space import GENERIC_RULES, Rule
from autotune.space.rules import pipeline_rule
from autotune.specs import Cluster
from autotune.trial.spec import PoolKind, TrialSpec

NCCL_KNOBS = frozenset({"nccl_algo", "nccl_proto"})
NCCL_MEANINGS = {
    "nccl_algo": "NCCL_ALGO for every rank (default: unset, NCCL chooses)",
    "nccl_proto": "NCCL_PROTO for every rank (default: unset, NCCL chooses)",
}
RECOMPUTE_MEANING = (
    "activation recomputation: none; selective (the attention core, Korthikanti et al.); "
    "full (each transformer block)"
)


class Engine(ABC):
    """A training engine. A new one is a folder `engines/<name>/` with the same files as
    the others: `engine.py` declares `name`, `knobs`, `engine_rules`, `traits` (what
    estimate/ and export/ read), `worker_module` (its rank worker, `worker.py`),
    `knob_meanings` and `frameworks` (the users' commands it runs, `jobs.py`) and implements
    `write_files` (`exports.py`); it is added to `ENGINES` in engines/__init__.py and has a
    search space in autotune/search_spaces/<name>.yaml. tests/contract/test_engine_contract.py then
    runs it."""

    name: ClassVar[str]
    knobs: ClassVar[frozenset[str]]
    """Knobs this engine reads; a space file may vary only these."""
    engine_rules: ClassVar[tuple[Rule, ...]] = ()
    traits: ClassVar[EngineTraits]
    """What estimate/ and export/ read of this engine (estimate/traits.py)."""
    worker_module: ClassVar[str]
    """The module `autotune.rank` runs on each rank of autotune's own trials of this engine."""
    frameworks: ClassVar[tuple[Framework, ...]] = ()
    """The users' commands this engine runs (`autotune run -- CMD`), most specific first."""
    warm_pool: ClassVar[bool] = False
    """Its worker module has a `SESSION` that a warm pool's ranks build trial after trial
    (rank/warm_pool.py): set only where building an engine twice in one process is
    shown to leave no state behind (tests/launchers/test_warm_pool.py)."""
    knob_meanings: ClassVar[dict[str, str]] = {}
    """Each knob in this engine's own words and units (its config keys or flags): `zero=1`
    or a bucket size means different things to DeepSpeed, Megatron-LM and PyTorch."""

    @property
    def rules(self) -> tuple[Rule, ...]:
        return GENERIC_RULES + (pipeline_rule(self.traits.pipeline_split),) + self.engine_rules

    def pool_for(self, spec: TrialSpec) -> PoolKind | None:
        """The pool autotune's own worker may run in: a warm one, for an engine shown to
        leave no state behind between trials."""
        return "warm" if self.warm_pool else None

    def environment(self, cluster: Cluster) -> dict[str, str]:
        """Variables every rank of a trial needs, besides the NCCL knobs."""
        return {}

    def script_hint(self, spec: TrialSpec) -> str:
        """How a user's own training script takes this config (train.sh says it)."""
        return self.traits.script_hint

    needs: ClassVar[tuple[str, ...]] = ("torch",)
    """Modules its trials import; the package extra of the engine's name installs them."""

    def check_runnable(self, cluster: Cluster) -> None:
        """Raise InputError when this engine's trials cannot run for real on this cluster
        from this machine (planning and simulation still can): here, a module they import
        that this Python lacks."""
        missing = [name for name in self.needs if not _importable(name)]
        if missing:
            raise InputError(
                f"the {self.name} engine's trials need {', '.join(missing)}, which this "
                f"Python lacks: pip install 'autotune[{self.name}]' (with the torch build of "
                "your CUDA), or plan and simulate without them"
            )

    @abstractmethod
    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        """Write the engine's own config files for this trial; return their paths."""


def _importable(module: str) -> bool:
    """Whether `module` can be imported here (its parent package too), without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
