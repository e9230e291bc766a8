"""Training engines: rules, config files and workers. Importing this package imports no torch."""

from autotune.engines.base import Engine
from autotune.engines.deepspeed import DeepSpeedEngine
from autotune.engines.megatron import MegatronEngine
from autotune.engines.torch_native import TorchEngine
from autotune.engines.traits import EngineTraits
from autotune.errors import InputError

ENGINES: dict[str, Engine] = {
    e.name: e for e in (DeepSpeedEngine(), TorchEngine(), MegatronEngine())
}


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise InputError(f"unknown engine {name!r}; engines: {', '.join(ENGINES)}")
    return ENGINES[name]


def traits_of(engine: str | EngineTraits) -> EngineTraits:
    """What estimate/ and export/ read of an engine, given by name or by its traits (an
    engine not registered, e.g. the ZeRO paper's plain formulas in a test)."""
    return engine if isinstance(engine, EngineTraits) else get_engine(engine).traits


__all__ = ["ENGINES", "Engine", "EngineTraits", "get_engine", "traits_of"]
