"""`--model` and `--cluster` values: a preset name or a YAML file, validated into frozen specs.

Every problem becomes an `InputError` with one line that names the file and the field.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError

from autotune.errors import InputError
from autotune.specs.cluster import Cluster, DeviceKind, Link, SlurmSettings
from autotune.specs.local import cpu_device, detect_local_cluster
from autotune.specs.presets import CLUSTER_KINDS, DEVICES, WORKLOADS, GiB
from autotune.specs.workload import Fp8Recipe, Workload

M = TypeVar("M", bound=BaseModel)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkloadFile(_Strict):
    name: str | None = None
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_query_groups: PositiveInt | None = None
    ffn_hidden_size: PositiveInt | None = None
    vocab_size: PositiveInt
    seq_length: PositiveInt
    global_batch_size: PositiveInt
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    fp8: Fp8Recipe = "none"
    swiglu: bool = False
    kv_channels: int = Field(default=0, ge=0, description="0: hidden_size / heads")
    num_moe_experts: int = Field(default=0, ge=0)
    moe_router_topk: PositiveInt = 2
    moe_ffn_hidden_size: int = Field(default=0, ge=0, description="0: ffn_hidden_size")
    moe_shared_expert_intermediate_size: int = Field(default=0, ge=0)
    moe_layer_freq: PositiveInt = 1


class LinkFile(_Strict):
    bandwidth_gbps: PositiveFloat = Field(description="GB/s per device, one direction")
    latency_us: float = Field(ge=0)


class DeviceFile(_Strict):
    name: str
    memory_gib: PositiveFloat
    peak_tflops: dict[Literal["bf16", "fp16", "fp32", "fp8"], PositiveFloat]
    host_memory_gib: float = Field(
        default=0, ge=0, description="host RAM per device, for offloaded states"
    )
    host_link_gbps: PositiveFloat = Field(default=25, description="host link, GB/s each way")


class SlurmFile(_Strict):
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    extra_sbatch: list[str] = Field(default_factory=list)


class ClusterFile(_Strict):
    name: str | None = None
    nodes: PositiveInt = 1
    devices_per_node: PositiveInt
    device: str | DeviceFile
    intra_link: LinkFile
    inter_link: LinkFile | None = None
    backend: Literal["nccl", "gloo"] = "nccl"
    slurm: SlurmFile | None = None
    nvlink_domain: PositiveInt | None = Field(
        default=None, description="devices in one NVLink domain, a multiple of a node's"
    )


def load_workload(value: str) -> Workload:
    """A preset name (`tiny`, `llama3-8b`, ...) or a path to a workload YAML file."""
    if value in WORKLOADS:
        return WORKLOADS[value]
    path = _existing_file(value, "model", sorted(WORKLOADS))
    spec = _validate(WorkloadFile, read_yaml_mapping(path), path)
    if not spec.kv_channels and spec.hidden_size % spec.num_attention_heads:
        raise InputError(
            f"{path}: hidden_size {spec.hidden_size} is not divisible by "
            f"num_attention_heads {spec.num_attention_heads} (set kv_channels, the width of "
            "a head, if the heads are not hidden_size / num_attention_heads wide)"
        )
    groups = spec.num_query_groups or spec.num_attention_heads
    if spec.num_attention_heads % groups:
        raise InputError(
            f"{path}: num_attention_heads {spec.num_attention_heads} is not "
            f"divisible by num_query_groups {groups}"
        )
    if spec.num_moe_experts and spec.moe_router_topk > spec.num_moe_experts:
        raise InputError(
            f"{path}: moe_router_topk {spec.moe_router_topk} is more than the "
            f"{spec.num_moe_experts} experts"
        )
    fields = spec.model_dump(exclude_none=True)
    fields.setdefault("name", path.stem)
    fields["num_query_groups"] = groups
    fields.setdefault("ffn_hidden_size", 4 * spec.hidden_size)
    return Workload(**fields)


def load_cluster(value: str) -> Cluster:
    """`local`, `local:N` (N gloo processes), `dgx-h100:16` (16 nodes), `gb200-nvl72:2` (2
    racks), or a cluster YAML file."""
    kind, _, count = value.partition(":")
    if kind == "local" or kind in CLUSTER_KINDS:
        nodes = _count(value, count)
        if kind == "local":
            return _local(nodes, explicit=bool(count))
        preset = CLUSTER_KINDS[kind]
        return Cluster(
            name=value if count else f"{kind}:1",
            nodes=nodes * preset.nodes_per_count,
            devices_per_node=preset.devices_per_node,
            device=DEVICES[preset.device],
            intra_link=preset.intra_link,
            inter_link=preset.inter_link,
            nvlink_domain=preset.nvlink_domain,
        )
    path = _existing_file(value, "cluster", ["local", *(f"{k}:N" for k in CLUSTER_KINDS)])
    spec = _validate(ClusterFile, read_yaml_mapping(path), path)
    if spec.nvlink_domain is not None and spec.nvlink_domain % spec.devices_per_node:
        raise InputError(
            f"{path}: nvlink_domain {spec.nvlink_domain} is not a multiple of "
            f"devices_per_node {spec.devices_per_node}"
        )
    world = spec.nodes * spec.devices_per_node
    domain = spec.nvlink_domain
    if domain is not None and domain < world and world % domain:
        raise InputError(
            f"{path}: {world} devices are not whole NVLink domains of {spec.nvlink_domain}"
        )
    intra = _link(spec.intra_link)
    return Cluster(
        name=spec.name or path.stem,
        nodes=spec.nodes,
        devices_per_node=spec.devices_per_node,
        device=_device(spec.device, spec.devices_per_node, path),
        intra_link=intra,
        inter_link=_link(spec.inter_link) if spec.inter_link else intra,
        backend=spec.backend,
        nvlink_domain=spec.nvlink_domain,
        slurm=SlurmSettings(
            **{**spec.slurm.model_dump(), "extra_sbatch": tuple(spec.slurm.extra_sbatch)}
        )
        if spec.slurm
        else SlurmSettings(),
    )


def _local(processes: int, explicit: bool) -> Cluster:
    """`local` detects; `local:N` asks for N gloo processes on this CPU (may oversubscribe)."""
    detected = detect_local_cluster()
    if not explicit:
        return detected
    if detected.backend == "nccl":
        raise InputError(
            "local:N sets a process count for CPU runs; this host has GPUs, use 'local'"
        )
    return dataclasses.replace(
        detected,
        name=f"local:{processes}",
        devices_per_node=processes,
        device=cpu_device(processes),
    )


def _count(value: str, count: str) -> int:
    if not count:
        return 1
    if not count.isdigit() or int(count) < 1:
        raise InputError(f"cluster {value!r}: the count after ':' must be a positive integer")
    return int(count)


def _device(device: str | DeviceFile, per_node: int, path: Path) -> DeviceKind:
    if isinstance(device, str):
        if device == "cpu":
            return cpu_device(per_node)
        if device not in DEVICES:
            raise InputError(
                f"{path}: unknown device {device!r}; known: cpu, {', '.join(DEVICES)}"
            )
        return DEVICES[device]
    return DeviceKind(
        name=device.name,
        memory_bytes=int(device.memory_gib * GiB),
        peak_flops={k: v * 1e12 for k, v in device.peak_tflops.items()},
        host_memory_bytes=int(device.host_memory_gib * GiB),
        host_link_bytes_per_s=device.host_link_gbps * 1e9,
    )


def _link(link: LinkFile) -> Link:
    return Link(bandwidth_bytes_per_s=link.bandwidth_gbps * 1e9, latency_s=link.latency_us * 1e-6)


def _existing_file(value: str, what: str, presets: list[str]) -> Path:
    path = Path(value)
    if not path.is_file():
        raise InputError(
            f"unknown {what} {value!r}: not a preset ({', '.join(presets)}) and not a file"
        )
    return path


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping, or an InputError naming the file."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InputError(
            f"{path}:{where} malformed YAML: {getattr(exc, 'problem', exc)}"
        ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (UTF-8 YAML expected)") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of fields at the top level")
    return data


def _validate(model: type[M], data: dict[str, Any], path: Path) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # For a field that takes one of several forms, the deepest error is the useful one
        # (a device given as a mapping with a bad memory, not "should be a string").
        err = max(exc.errors(), key=lambda e: len(e["loc"]))
        parts = [str(p) for p in err["loc"] if not _is_type_tag(p)]
        raise InputError(f"{path}: {'.'.join(parts) or '(top level)'}: {err['msg']}") from None


def _is_type_tag(part: object) -> bool:
    """pydantic names the member of a union it tried (`str`, `DeviceFile`) in the location."""
    return isinstance(part, str) and (part[:1].isupper() or part in ("str", "int", "float"))
