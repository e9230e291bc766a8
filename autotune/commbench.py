"""`autotune commbench`: collective bandwidth on this cluster's backend, as nccl-tests
reports it, beside a plain memory copy measured in the same run. Launches
autotune.commbench_worker with torchrun and writes the table as CSV and JSON."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from autotune.errors import InputError
from autotune.launchers.local import torchrun
from autotune.specs import Cluster

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+)\s*([KMG]?)I?B?", text.strip().upper())
    if not match:
        raise InputError(f"--sizes: {text!r} is not a size like 1K, 64M or 1G")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_sizes(text: str) -> list[int]:
    """`1K:256M` -> every power of two from 1 KiB to 256 MiB."""
    low, sep, high = text.partition(":")
    if not sep:
        raise InputError(f"--sizes: expected MIN:MAX, e.g. 1K:256M, not {text!r}")
    lo, hi = parse_size(low), parse_size(high)
    if lo < 1024 or hi < lo:
        raise InputError(f"--sizes: need 1K <= MIN <= MAX, got {text!r}")
    sizes, size = [], 1 << (lo - 1).bit_length()
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def parse_ops(text: str) -> list[str]:
    ops = [o.strip() for o in text.split(",") if o.strip()]
    unknown = [o for o in ops if o not in OPS]
    if unknown or not ops:
        raise InputError(f"--ops: unknown {', '.join(unknown) or '(none)'}; ops: {', '.join(OPS)}")
    return ops


def run_commbench(
    cluster: Cluster, ops: list[str], sizes: list[int], out_dir: Path, timeout_s: float = 1800
) -> dict[str, Any]:
    """Run the benchmark on this host's devices; return its report (also in out_dir)."""
    if cluster.nodes != 1:
        raise InputError("commbench runs on this host only (one node) for now")
    folder = (out_dir / datetime.now().strftime("%Y%m%d-%H%M%S")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    plan = {
        "backend": cluster.backend,
        "ops": ops,
        "sizes": sizes,
        "out": str(folder / "report.json"),
    }
    (folder / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    command = [
        torchrun(), "--standalone", "--nproc-per-node", str(cluster.devices_per_node),
        "-m", "autotune.commbench_worker", "plan.json",
    ]  # fmt: skip
    with (folder / "log.txt").open("w") as log:
        done = subprocess.run(
            command, cwd=folder, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
        )
    if done.returncode != 0 or not (folder / "report.json").exists():
        raise InputError(f"commbench failed (exit {done.returncode}); see {folder / 'log.txt'}")
    report = json.loads((folder / "report.json").read_text())
    pd.DataFrame(report["rows"]).to_csv(folder / "commbench.csv", index=False)
    report["folder"] = str(folder)
    return report


def largest_busbw(report: dict[str, Any], op: str = "all_reduce") -> float | None:
    rows = [r for r in report["rows"] if r["op"] == op]
    return max(rows, key=lambda r: r["bytes"])["busbw_gbps"] if rows else None
