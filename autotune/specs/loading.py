"""`--model` and `--cluster` values: a preset name or a YAML file, validated into frozen specs.

Every problem becomes an `InputError` with one line that names the file and the field.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from autotune.errors import InputError, did_you_mean
from autotune.specs.cluster import Cluster, DeviceKind, Link
from autotune.specs.local import cpu_device, detect_local_cluster
from autotune.specs.presets import CLUSTER_KINDS, DEVICES, WORKLOADS, GiB
from autotune.specs.workload import Fp8Recipe, Workload

M = TypeVar("M", bound=BaseModel)

# Bounds on what a file may say, far above any real job: the planner multiplies counts and
# enumerates their divisors, so a count of 10^20 would make it run for hours, not fail.
MAX_INT = 10**15
MAX_NODES = 100_000
MAX_DEVICES_PER_NODE = 1_024
MAX_GLOBAL_BATCH = 10**9
MAX_FILE_BYTES = 1 << 20
"""A model, cluster or space file is a few hundred bytes; /dev/zero would be read for ever."""
MAX_DEPTH = 64
"""Nesting of YAML flow collections: yaml's parser recurses once a level (10,000 `[`s
overflow Python's stack); no file autotune reads nests deeper than 3."""


def _printable(text: str) -> str:
    """Names and SLURM values end up in sbatch lines, file names and tables: a line break
    there would start a new `#SBATCH` line (found only at export, after every trial ran)."""
    if any(not ch.isprintable() for ch in text):
        raise ValueError(f"control characters (line breaks, NUL, tabs) are not allowed: {text!r}")
    return text


Text = Annotated[str, AfterValidator(_printable)]
PositiveInt = Annotated[int, Field(gt=0, le=MAX_INT)]
PositiveFloat = Annotated[float, Field(gt=0, le=1e15)]


class _Strict(BaseModel):
    """No unknown field, no NaN, and no value of another type (a `true` is no count)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class WorkloadFile(_Strict):
    name: Text | None = None
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_query_groups: PositiveInt | None = None
    ffn_hidden_size: PositiveInt | None = None
    vocab_size: PositiveInt
    seq_length: PositiveInt
    global_batch_size: int = Field(gt=0, le=MAX_GLOBAL_BATCH)
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    fp8: Fp8Recipe = "none"
    swiglu: bool = False
    kv_channels: int = Field(default=0, ge=0, le=MAX_INT, description="0: hidden_size / heads")
    num_moe_experts: int = Field(default=0, ge=0, le=MAX_INT)
    moe_router_topk: PositiveInt = 2
    moe_ffn_hidden_size: int = Field(default=0, ge=0, le=MAX_INT, description="0: ffn_hidden_size")
    moe_shared_expert_intermediate_size: int = Field(default=0, ge=0, le=MAX_INT)
    moe_layer_freq: PositiveInt = 1


class LinkFile(_Strict):
    bandwidth_gbps: PositiveFloat = Field(description="GB/s per device, one direction")
    latency_us: float = Field(ge=0, le=1e9)


class DeviceFile(_Strict):
    name: Text
    memory_gib: PositiveFloat
    peak_tflops: dict[Literal["bf16", "fp16", "fp32", "fp8"], PositiveFloat]
    host_memory_gib: float = Field(
        default=0, ge=0, le=1e9, description="host RAM per device, for offloaded states"
    )
    host_link_gbps: PositiveFloat = Field(default=25, description="host link, GB/s each way")


class ClusterFile(_Strict):
    name: Text | None = None
    nodes: int = Field(default=1, gt=0, le=MAX_NODES)
    devices_per_node: int = Field(gt=0, le=MAX_DEVICES_PER_NODE)
    device: Text | DeviceFile
    intra_link: LinkFile
    inter_link: LinkFile | None = None
    backend: Literal["nccl", "gloo"] = "nccl"
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
    """`local`, `local:N` (N gloo processes), `local:NxM` (N nodes of M gloo processes, for a
    SLURM cluster of this host's namespaces), `dgx-h100:16` (16 nodes), `gb200-nvl72:2` (2
    racks), or a cluster YAML file."""
    kind, colon, count = value.partition(":")
    if (kind == "local" or kind in CLUSTER_KINDS) and colon and not count:
        raise InputError(f"cluster {_short(value)}: give a count after ':' or drop the ':'")
    if kind in CLUSTER_KINDS and not colon:  # one node is seldom what was meant: say it
        raise InputError(f"cluster {kind}: give its node count, e.g. {kind}:1 or {kind}:16")
    if kind == "local" or kind in CLUSTER_KINDS:
        if kind == "local":
            nodes, processes = _local_layout(value, count)
            return _local(nodes, processes, explicit=bool(count))
        preset = CLUSTER_KINDS[kind]
        nodes = _count(value, count, MAX_NODES // preset.nodes_per_count)
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
    data = read_yaml_mapping(path)
    sections = {
        key: data.pop(key)
        for key in list(data)
        if key not in ClusterFile.model_fields and isinstance(data[key], dict)
    }
    spec = _validate(ClusterFile, data, path)
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
    device = _device(spec.device, spec.devices_per_node, path)
    if spec.backend == "nccl" and device.generation == "cpu":
        raise InputError(f"{path}: backend nccl needs GPUs; device {device.name} runs gloo")
    intra = _link(spec.intra_link)
    return Cluster(
        name=spec.name or path.stem,
        nodes=spec.nodes,
        devices_per_node=spec.devices_per_node,
        device=device,
        intra_link=intra,
        inter_link=_link(spec.inter_link) if spec.inter_link else intra,
        backend=spec.backend,
        nvlink_domain=spec.nvlink_domain,
        launcher_sections=sections,
    )


def _local_layout(value: str, count: str) -> tuple[int, int]:
    """Nodes and processes per node: `local:M` is one node of M, `local:NxM` N nodes of M."""
    nodes, x, processes = count.partition("x")
    if not x:
        return 1, _count(value, count, MAX_DEVICES_PER_NODE)
    if not nodes or not processes:
        raise InputError(f"cluster {_short(value)}: give local:NxM, N nodes of M processes")
    return _count(value, nodes, MAX_NODES), _count(value, processes, MAX_DEVICES_PER_NODE)


def _local(nodes: int, processes: int, explicit: bool) -> Cluster:
    """`local` detects; `local:N` asks for N gloo processes on this CPU (may oversubscribe);
    `local:NxM` for N nodes of M, all on this host (scripts/slurm.sh --nodes N)."""
    detected = detect_local_cluster()
    if not explicit:
        return detected
    if detected.backend == "nccl":
        raise InputError(
            "local:N sets a process count for CPU runs; this host has GPUs, use 'local'"
        )
    return dataclasses.replace(
        detected,
        name=f"local:{processes}" if nodes == 1 else f"local:{nodes}x{processes}",
        nodes=nodes,
        devices_per_node=processes,
        device=cpu_device(nodes * processes),
    )


def _count(value: str, count: str, most: int) -> int:
    if not count:
        return 1
    if not (count.isascii() and count.isdigit() and len(count) < 10 and 1 <= int(count) <= most):
        raise InputError(
            f"cluster {_short(value)}: the count after ':' must be a positive integer, "
            f"at most {most:,}"
        )
    return int(count)


def _short(value: str) -> str:
    """A user's value quoted for an error line, cut short if long."""
    return repr(value) if len(value) <= 60 else repr(value[:57] + "...")


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
    """The file `value` names; a path that does not exist is said so, a word that is no
    preset gets the nearest one."""
    path = Path(value)
    if path.is_file():
        return path
    if "/" in value or path.suffix in (".yaml", ".yml"):
        raise InputError(f"{what} file {_short(value)} does not exist")
    bare = [p.removesuffix(":N") for p in presets]
    hint = did_you_mean(value, bare)
    raise InputError(
        f"unknown {what} {_short(value)}: not a preset ({', '.join(presets)}) and not a file{hint}"
    )


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping, or an InputError naming the file."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise InputError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB; not a spec file")
        text = raw.decode()
        _check_depth(text, path)
        data = yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 - a SafeLoader
    except RecursionError:
        raise InputError(f"{path}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise InputError(f"{path}:{where} malformed YAML: {problem}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (UTF-8 YAML expected)") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of fields at the top level")
    return data


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader that refuses a key written twice in one mapping (YAML would keep
    the last and drop the first silently); keys a merge (`<<`) brings in may be overridden."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool):
                continue  # a list or mapping as a key: yaml refuses it itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _check_depth(text: str, path: Path) -> None:
    """Refuse flow collections nested deeper than MAX_DEPTH before yaml recurses into them.
    Brackets inside quotes count too: a cheap over-estimate that no real file reaches."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    if deepest > MAX_DEPTH:
        raise InputError(f"{path}: nested too deeply (at most {MAX_DEPTH} levels)")


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
