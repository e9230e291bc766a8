"""Training engines and the users' commands they run, registered by name. Importing this
package imports no torch.

A new engine is a folder `engines/<name>/` (engine.py, exports.py, worker.py, jobs.py) and one
line in `ENGINES`; its frameworks (`Engine.frameworks`) are registered with it.
"""

from autotune.engines.base import Engine
from autotune.engines.deepspeed.engine import DeepSpeedEngine
from autotune.engines.framework import Framework
from autotune.engines.megatron.engine import MegatronEngine
from autotune.engines.torch.engine import TorchEngine
from autotune.errors import InputError, did_you_mean

ENGINES: dict[str, Engine] = {
    e.name: e for e in (DeepSpeedEngine(), TorchEngine(), MegatronEngine())
}
FRAMEWORKS: dict[str, Framework] = {
    f.name: f for engine in ENGINES.values() for f in engine.frameworks
}
"""Every framework by name (`UserJob.framework`); a test may register one of its own."""


ALIASES = {
    **dict.fromkeys(("fsdp", "fsdp2", "ddp", "dtensor", "torchtitan", "pytorch"), "torch"),
    **dict.fromkeys(("megatron-lm", "megatron-core", "mcore", "nemo"), "megatron"),
    **dict.fromkeys(("ds", "zero", "huggingface", "hf", "trainer"), "deepspeed"),
}
"""What people call the frameworks an engine runs, for the error that names the engine."""


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        known = ALIASES.get(name.lower())
        hint = f"; {name} runs on --engine {known}" if known else did_you_mean(name, ENGINES)
        raise InputError(f"unknown engine {name!r}; engines: {', '.join(ENGINES)}{hint}")
    return ENGINES[name]


def get_framework(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise InputError(f"unknown framework {name!r}; frameworks: {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[name]


def frameworks_of(engine: str) -> list[Framework]:
    """The frameworks whose commands `engine` runs, in the order they were registered."""
    return [f for f in FRAMEWORKS.values() if f.engine == engine]


__all__ = [
    "ENGINES",
    "FRAMEWORKS",
    "Engine",
    "Framework",
    "frameworks_of",
    "get_engine",
    "get_framework",
]
