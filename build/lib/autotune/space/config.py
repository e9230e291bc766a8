"""One candidate configuration and the knob names shared by space files, flags and exports."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from autotune.errors import InputError, did_you_mean
from autotune.units import parse_count

Recompute = Literal["none", "selective", "full"]
RecomputeMethod = Literal["uniform", "block"]
MoeDispatcher = Literal["alltoall", "allgather"]


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """A parallel layout and its tuning knobs. `dp` is derived from the world size."""

    tp: int = 1
    pp: int = 1
    vpp: int = 1
    """Virtual pipeline stages per rank (interleaved schedule when > 1)."""
    cp: int = 1
    """Context parallel (Megatron --context-parallel-size): each sequence split over cp ranks,
    which exchange keys and values around a ring in attention."""
    dp: int = 1
    ep: int = 1
    """Expert parallel (Megatron --expert-model-parallel-size): a mixture of experts' routed
    experts split over ep ranks of the tp·cp·dp ones, which exchange tokens all-to-all."""
    etp: int = 1
    """Expert tensor parallel (--expert-tensor-parallel-size): each expert's matrices split
    over etp ranks. The expert data-parallel size is tp·cp·dp / (ep·etp)."""
    moe_dispatcher: MoeDispatcher = "alltoall"
    """How tokens reach their experts (--moe-token-dispatcher-type): all-to-all over the
    expert-parallel group, or all-gather of every token and a reduce-scatter back."""
    ep_comm_overlap: bool = False
    """Megatron --overlap-moe-expert-parallel-comm: one micro-batch's forward runs beside
    another's backward, each one's expert all-to-alls hidden behind the other's compute."""
    zero: int = 0
    """ZeRO stage 0-3 (DeepSpeed; FSDP for torch); Megatron: 1 = distributed optimizer."""
    hsdp: int = 1
    """Replicas of hybrid sharding (torch FSDP2 over a 2-D replicate x shard mesh): each of
    hsdp replicas shards the states over dp/hsdp ranks, and the replicas all-reduce their
    shards' gradients; 1: every data-parallel rank shards."""
    mbs: int = 1
    recompute: Recompute = "none"
    recompute_method: RecomputeMethod = "uniform"
    """With full recomputation (Megatron): `uniform` checkpoints every chunk of
    `recompute_num_layers` layers; `block` recomputes only the first `recompute_num_layers`
    layers of each pipeline stage and keeps the rest."""
    recompute_num_layers: int = 1
    recompute_modules: str = "core_attn"
    """With selective recomputation (Megatron --recompute-modules), the modules whose
    forward runs again in backward, joined by '+': core_attn (Megatron's default), mlp,
    moe_act (an MoE layer's expert activations), layernorm."""
    sp: bool = False
    reduce_bucket: int = 500_000_000
    """DeepSpeed reduce_bucket_size, in elements."""
    allgather_bucket: int = 500_000_000
    """DeepSpeed allgather_bucket_size, in elements."""
    ddp_bucket_mb: int = 25
    """Gradient bucket in MB: PyTorch DDP's bucket_cap_mb; Megatron's --ddp-bucket-size counts
    parameters, so its export divides by the 4 bytes of an fp32 gradient."""
    overlap_comm: bool = False
    """DeepSpeed overlap_comm; Megatron --overlap-grad-reduce."""
    offload_optimizer: bool = False
    """DeepSpeed ZeRO-Offload: the optimizer states and step on the host CPU (ZeRO 1-3),
    gradients down and updated parameters up over the host link every step."""
    offload_param: bool = False
    """DeepSpeed ZeRO-Infinity's parameter offload to host memory (ZeRO 3): each layer's
    parameters come up over the host link when gathered."""
    overlap_param_gather: bool = False
    """Megatron --overlap-param-gather (distributed optimizer only)."""
    tp_comm_overlap: bool = False
    """Megatron --tp-comm-overlap: Transformer Engine overlaps sequence parallelism's
    all-gathers and reduce-scatters with the GEMMs they feed and follow (CUDA only)."""
    nccl_algo: str = "default"
    nccl_proto: str = "default"

    def grad_accum(self, global_batch_size: int) -> int:
        """Micro-batches per optimizer step on each data-parallel rank."""
        return global_batch_size // (self.mbs * self.dp)

    def as_dict(self) -> dict[str, Any]:
        """The knobs by name; every knob is a plain value, so no copying (a study keys and
        ranks a hundred thousand configs)."""
        return {name: getattr(self, name) for name in _KNOB_NAMES}

    def differs_from_default(self) -> dict[str, Any]:
        """The knobs this config sets to something other than the default: a short label."""
        default = TrainConfig(dp=self.dp)
        return {k: v for k, v in self.as_dict().items() if getattr(default, k) != v or k == "dp"}

    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.differs_from_default().items())


def nccl_default(config: TrainConfig) -> TrainConfig:
    """The config with NCCL's own algorithm and protocol choices: the layout NCCL knobs refine."""
    return dataclasses.replace(config, nccl_algo="default", nccl_proto="default")


KNOBS: dict[str, type] = {
    f.name: type(getattr(TrainConfig(), f.name)) for f in dataclasses.fields(TrainConfig)
}
RECOMPUTE_VALUES = ("none", "selective", "full")
RECOMPUTE_METHODS = ("uniform", "block")
MOE_DISPATCHERS = ("alltoall", "allgather")
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe_act", "layernorm")
NCCL_ALGOS = ("Ring", "Tree", "NVLS", "NVLSTree")
NCCL_PROTOS = ("LL", "LL128", "Simple")
NCCL_VALUES = {"nccl_algo": ("default", *NCCL_ALGOS), "nccl_proto": ("default", *NCCL_PROTOS)}
"""What NCCL_ALGO and NCCL_PROTO may be set to: the algorithms and protocols the cost model
prices (estimate/nccl_tables.py's tables are keyed by these names); NCCL refuses others at
run time."""
ZERO_STAGES = (0, 3)
MAX_KNOB = 10**15
"""The largest integer knob (bucket sizes reach 10^10 elements at most in practice)."""


def coerce_knob(name: str, value: Any, where: str) -> Any:
    """A knob value from YAML or a flag, converted to the knob's type or an InputError."""
    if name not in KNOBS:
        hint = did_you_mean(name, KNOBS)
        raise InputError(f"{where}: unknown knob {name!r}; knobs: {', '.join(KNOBS)}{hint}")
    kind = KNOBS[name]
    text = str(value).strip()
    if kind is bool:
        if isinstance(value, bool):
            return value
        if text.lower() in ("true", "1", "yes", "on"):
            return True
        if text.lower() in ("false", "0", "no", "off"):
            return False
        raise InputError(f"{where}: knob {name} takes true or false, not {text!r}")
    if kind is int:
        return _coerce_int(name, text, where)
    if name == "recompute" and text not in RECOMPUTE_VALUES:
        raise InputError(f"{where}: recompute takes {', '.join(RECOMPUTE_VALUES)}, not {text!r}")
    if name == "recompute_method" and text not in RECOMPUTE_METHODS:
        raise InputError(
            f"{where}: recompute_method takes {', '.join(RECOMPUTE_METHODS)}, not {text!r}"
        )
    modules = text.split("+")
    if name == "recompute_modules" and (
        not set(modules) <= set(RECOMPUTE_MODULES) or len(set(modules)) != len(modules)
    ):
        raise InputError(
            f"{where}: recompute_modules joins distinct {', '.join(RECOMPUTE_MODULES)} with "
            f"'+', not {text!r}"
        )
    if name == "moe_dispatcher" and text not in MOE_DISPATCHERS:
        raise InputError(
            f"{where}: moe_dispatcher takes {', '.join(MOE_DISPATCHERS)}, not {text!r}"
        )
    if name in NCCL_VALUES:
        return _nccl_value(name, text, where)
    return text


def _coerce_int(name: str, text: str, where: str) -> int:
    """An integer knob: a count (500000000, 5e8, 500M), finite, whole, at least 1 (ZeRO's
    stage 0-3), and at most MAX_KNOB: planning multiplies knobs together and enumerates their
    products, so a 400-digit value would make it run for ever instead of failing."""
    number = parse_count(text)
    if number is None or not math.isfinite(number):
        raise InputError(f"{where}: knob {name} takes an integer, not {_short(text)}")
    low, high = ZERO_STAGES if name == "zero" else (1, MAX_KNOB)
    if number != int(number) or not low <= number <= high:
        allowed = "a ZeRO stage, 0 to 3" if name == "zero" else "a positive integer up to 10^15"
        raise InputError(f"{where}: knob {name} takes {allowed}, not {_short(text)}")
    return int(number)


def _short(text: str) -> str:
    """A user's value quoted for an error line, cut short if long."""
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def _nccl_value(name: str, text: str, where: str) -> str:
    """NCCL_ALGO or NCCL_PROTO as NCCL spells it (any case given), or `default` (unset)."""
    allowed = NCCL_VALUES[name]
    canonical = {value.lower(): value for value in allowed}.get(text.lower())
    if canonical is None:
        raise InputError(f"{where}: {name} takes {', '.join(allowed)}, not {_short(text)}")
    return canonical


def parse_overrides(text: str, option: str = "--config") -> dict[str, Any]:
    """`zero=2,mbs=4` -> {"zero": 2, "mbs": 4}, each value typed by its knob; `option` names
    the flag in errors."""
    overrides: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not value.strip():
            raise InputError(f"{option}: expected knob=value, got {item!r}")
        if name.strip() in overrides:
            raise InputError(f"{option}: {name.strip()} is given twice; give each knob once")
        overrides[name.strip()] = coerce_knob(name.strip(), value, option)
    return overrides


_KNOB_NAMES = tuple(f.name for f in dataclasses.fields(TrainConfig))


_KEYED_ONLY_WHEN_SET: dict[str, Any] = {
    "cp": 1,
    "ep": 1,
    "etp": 1,
    "moe_dispatcher": "alltoall",
    "hsdp": 1,
    "offload_optimizer": False,
    "offload_param": False,
    "recompute_modules": "core_attn",
    "tp_comm_overlap": False,
    "ep_comm_overlap": False,
}
"""Knobs a key names only when set away from their default (the one they hold in most
configs), with their defaults."""


def config_key(config: TrainConfig) -> str:
    """A config's identity in a study and in tables: its knobs as sorted JSON, those of
    `_KEYED_ONLY_WHEN_SET` only when set. Every trial stores its key and stored trials are
    never rewritten, so a config's key stays the same string as knobs are added: a knob added
    to `TrainConfig` joins `_KEYED_ONLY_WHEN_SET`, which also keeps keys short."""
    knobs = config.as_dict()
    for name, default in _KEYED_ONLY_WHEN_SET.items():
        if knobs[name] == default:
            del knobs[name]
    return json.dumps(knobs, sort_keys=True)
