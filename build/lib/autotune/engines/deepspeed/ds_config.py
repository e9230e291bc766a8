"""A ds_config read as DeepSpeed reads it: its JSON, its ZeRO section (the deprecated boolean
form too), its numbers and its offload devices. Pure: no DeepSpeed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.errors import InputError


def read_ds_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"DeepSpeed config {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"DeepSpeed config {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"DeepSpeed config {path}: expected a JSON object")
    return data


DS_BUCKET = 500_000_000
"""DeepSpeed's reduce_bucket_size and allgather_bucket_size when a ds_config leaves them out
(`DeepSpeedZeroConfig` in deepspeed/runtime/zero/config.py)."""


def whole(value: object) -> int | None:
    """A ds_config number as DeepSpeed's pydantic config takes it (5e8 in the JSON: a float)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def zero_section(base: dict[str, Any]) -> dict[str, Any]:
    """The ds_config's ZeRO settings as DeepSpeed reads them (`get_zero_config`,
    deepspeed/runtime/zero/config.py): `"zero_optimization": true` is the deprecated form,
    stage 1 with the top-level `allgather_size` (`read_zero_config_deprecated`)."""
    zero = base.get("zero_optimization")
    if isinstance(zero, bool):
        if not zero:
            return {"stage": 0}
        return {"stage": 1, "allgather_bucket_size": base.get("allgather_size", DS_BUCKET)}
    return zero if isinstance(zero, dict) else {}


def offloads_to_cpu(section: object) -> bool:
    """Whether a ds_config offload section sends states to the CPU (none given: no offload;
    NVMe offload is not modelled and reads as no CPU offload)."""
    return isinstance(section, dict) and section.get("device") == "cpu"


def offloads_to_nvme(section: object) -> bool:
    """A ds_config offload section that sends states to NVMe (ZeRO-Infinity, DeepSpeed's
    `OffloadDeviceEnum.nvme` in runtime/zero/offload_config.py): kept as given in every trial
    and the export, and not modelled."""
    return isinstance(section, dict) and section.get("device") == "nvme"
