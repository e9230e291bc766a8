"""`autotune commbench`: collective bandwidth on this cluster's backend, as nccl-tests
reports it, beside a plain memory copy measured in the same run. On NCCL it also sweeps
NCCL_ALGO x NCCL_PROTO for each collective. Launches autotune.commbench.worker with torchrun
and writes the table as CSV and JSON."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from autotune.errors import InputError, LaunchError
from autotune.estimate.nccl_tables import PROTOS
from autotune.launchers.base import LOG_FILE, Launcher, LaunchRequest
from autotune.launchers.local import LocalLauncher
from autotune.specs import Cluster

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
GROUPS = ("intra", "inter")
PLAN_FILE = "plan.json"
REPORT_FILE = "report.json"
SWEEP_ALGOS = {
    "all_reduce": ("Ring", "Tree", "NVLS", "NVLSTree"),
    "all_gather": ("Ring", "NVLS"),
    "reduce_scatter": ("Ring", "NVLS"),
    "broadcast": ("Ring",),
}
"""The algorithms NCCL implements for each collective; all-to-all and send/recv are
point-to-point and take no NCCL_ALGO."""
SIMPLE_ONLY = ("NVLS", "NVLSTree")


def nccl_variants(op: str) -> list[dict[str, str]]:
    """NCCL's own choice first, then every algorithm x protocol NCCL offers for `op`."""
    forced = [
        {"NCCL_ALGO": algo, "NCCL_PROTO": proto}
        for algo in SWEEP_ALGOS.get(op, ())
        for proto in (("Simple",) if algo in SIMPLE_ONLY else PROTOS)
    ]
    return [{}, *forced]


def parse_groups(text: str, cluster: Cluster) -> list[str]:
    """`intra` (a node's ranks), `intra:K` (blocks of K adjacent ranks in a node, as TP of
    size K) and `inter` (the same local rank on every node, as DP across nodes)."""
    if cluster.domain_size > cluster.devices_per_node:
        raise InputError(
            f"commbench measures groups by node; {cluster.name}'s NVLink domain spans "
            f"{cluster.domain_size // cluster.devices_per_node} nodes, where its fits would "
            "price NVLink groups as network ones"
        )
    groups = [g.strip() for g in text.split(",") if g.strip()]
    if not groups:
        raise InputError(f"--groups: none given; groups: {', '.join(GROUPS)} or intra:K")
    for g in groups:
        shape, _, size = g.partition(":")
        if shape not in GROUPS or (size and (shape != "intra" or not size.isdigit())):
            raise InputError(f"--groups: unknown {g!r}; groups: {', '.join(GROUPS)} or intra:K")
        per_node = cluster.devices_per_node
        if size and not (1 < int(size) <= per_node and per_node % int(size) == 0):
            raise InputError(
                f"--groups {g}: K must divide the {per_node} devices per node and exceed 1"
            )
    if "inter" in groups and cluster.nodes < 2:
        raise InputError(f"--groups inter: cluster {cluster.name!r} has one node")
    return groups


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
    cluster: Cluster,
    ops: list[str],
    sizes: list[int],
    out_dir: Path,
    groups: tuple[str, ...] = ("intra",),
    sweep: bool = True,
    launcher: Launcher | None = None,
    timeout_s: float = 1800,
) -> dict[str, Any]:
    """Run the benchmark on the cluster through a trial launcher (torchrun on this host by
    default, or SLURM across nodes); return its report (also in out_dir)."""
    launcher = launcher or LocalLauncher()
    if cluster.nodes != 1 and launcher.name == "local":
        raise InputError("commbench on several nodes needs --launcher slurm")
    launcher.check(cluster)
    folder = (out_dir / datetime.now().strftime("%Y%m%d-%H%M%S")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    swept = sweep and cluster.backend == "nccl"
    plan = {
        "backend": cluster.backend,
        "cluster": cluster.name,
        "devices_per_node": cluster.devices_per_node,
        "groups": list(groups),
        "ops": ops,
        "variants": {op: nccl_variants(op) if swept else [{}] for op in ops},
        "sizes": sizes,
        "out": str(folder / REPORT_FILE),
    }
    (folder / PLAN_FILE).write_text(json.dumps(plan, indent=2) + "\n")
    outcome = launcher.run(
        LaunchRequest(
            folder=folder,
            worker_module="autotune.commbench.worker",
            worker_file=PLAN_FILE,
            nprocs_per_node=cluster.devices_per_node,
            nnodes=cluster.nodes,
            time_limit_s=timeout_s,
        )
    )
    if not (folder / REPORT_FILE).exists():
        why = outcome.error or f"exit {outcome.returncode}"
        raise LaunchError(f"commbench failed ({why}); see {folder / LOG_FILE}")
    report = json.loads((folder / REPORT_FILE).read_text())
    pd.DataFrame(report["rows"]).to_csv(folder / "commbench.csv", index=False)
    report["folder"] = str(folder)
    return report


def sweep_winners(report: dict[str, Any]) -> pd.DataFrame:
    """Per collective, group and size: the fastest NCCL variant and its time against NCCL's
    default (below 1 means the forced setting was faster). Empty without a sweep, and for
    one-rank groups: they cross no link, so a "faster" setting there is launch noise."""
    rows = pd.DataFrame(report["rows"])
    rows = rows[rows.ranks > 1]
    keys = ["op", "group", "bytes"]
    default = rows[rows.algo == "default"].set_index(keys)["time_s"].rename("default_s")
    forced = rows[rows.algo != "default"]
    if forced.empty:
        return pd.DataFrame()
    best = forced.loc[forced.groupby(keys)["time_s"].idxmin()].join(default, on=keys)
    best["vs_default"] = best.time_s / best.default_s
    return best[[*keys, "algo", "proto", "time_s", "default_s", "vs_default"]].reset_index(
        drop=True
    )
