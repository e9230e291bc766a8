"""Training engines: rules, config files and workers. Importing this package imports no torch."""

from autotune.engines.base import Engine
from autotune.engines.deepspeed import DeepSpeedEngine
from autotune.engines.megatron import MegatronEngine
from autotune.engines.torch_native import TorchEngine
from autotune.errors import InputError

ENGINES: dict[str, Engine] = {
    e.name: e for e in (DeepSpeedEngine(), TorchEngine(), MegatronEngine())
}


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise InputError(f"unknown engine {name!r}; engines: {', '.join(ENGINES)}")
    return ENGINES[name]


__all__ = ["ENGINES", "Engine", "get_engine"]
