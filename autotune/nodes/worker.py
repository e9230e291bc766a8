"""Run by torchrun on every node for the node check: each rank times a matrix multiply
(compute) and a copy (memory bandwidth) on its device, best of several short runs, all
nodes at once; then the first ranks of neighbouring nodes time a send and receive between
them, one pair at a time. Rank 0 writes every reading to the plan's `out`."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

WINDOW_S = 0.3
WINDOWS = 4
"""Compute and memory are read as throughput over windows of `WINDOW_S` (a throttled node,
by a power cap or a CPU quota, may still run one short burst at full speed), the best of
`WINDOWS`, so that a passing hiccup does not make a healthy node look slow."""
REPEATS = 5
"""Exchanges per link reading; the best is kept."""


def _device(backend: str) -> torch.device:
    """The rank's GPU, or a CPU on one thread: the check compares nodes, and threads that
    outnumber a node's cores would time the contention between them instead."""
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        return torch.device("cuda", torch.cuda.current_device())
    torch.set_num_threads(1)
    return torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_rate(work: Callable[[], object], amount: float, device: torch.device) -> float:
    """The best, over `WINDOWS` windows, of `amount` per second of `work` run back to back."""
    work()
    best = 0.0
    for _ in range(WINDOWS):
        _sync(device)
        start, calls = time.perf_counter(), 0
        while (elapsed := time.perf_counter() - start) < WINDOW_S:
            work()
            _sync(device)
            calls += 1
        best = max(best, calls * amount / elapsed)
    return best


def compute_tflops(device: torch.device, size: int) -> float:
    """TFLOP/s of a square matrix multiply (bf16 on a GPU, fp32 on a CPU)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    return best_rate(lambda: a @ b, 2 * size**3, device) / 1e12


def memory_gbps(device: torch.device, size: int) -> float:
    """GB/s of a copy of `size` bytes (read and write counted once, as commbench's)."""
    src = torch.ones(size // 4, device=device)
    dst = torch.empty_like(src)
    return best_rate(lambda: dst.copy_(src), size, device) / 1e9


def link_gbps(peer: int, device: torch.device, size: int, group: dist.ProcessGroup) -> float:
    """Best GB/s of `size` bytes sent to `peer` and back (each way counted once)."""
    buf = torch.ones(size // 4, device=device)
    me = dist.get_rank()
    best = float("inf")
    for _ in range(REPEATS):
        dist.barrier(group=group)
        start = time.perf_counter()
        for sender in sorted((me, peer)):
            if sender == me:
                dist.send(buf, dst=peer, group=group)
            else:
                dist.recv(buf, src=peer, group=group)
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size / best / 1e9


def _links(plan: dict[str, Any], device: torch.device) -> list[dict[str, Any]]:
    """Each node's first rank with the next node's, one pair at a time (a ring; one link for
    two nodes); every rank takes part in making each pair's group."""
    per_node, world = plan["devices_per_node"], dist.get_world_size()
    nodes = world // per_node
    pairs = [(i, (i + 1) % nodes) for i in range(nodes if nodes > 2 else nodes - 1)]
    found = []
    for a, b in pairs:
        ranks = sorted((a * per_node, b * per_node))
        group = dist.new_group(ranks, backend=plan["backend"])
        if dist.get_rank() in ranks:
            peer = ranks[1] if dist.get_rank() == ranks[0] else ranks[0]
            gbps = link_gbps(peer, device, plan["link_bytes"], group)
            if dist.get_rank() == ranks[0]:
                found.append({"ranks": ranks, "gbps": gbps})
        dist.barrier()
    return found


def main(args: list[str], started: float) -> None:
    """Run the plan in the file `args[0]` (`autotune.rank` notes `started`; unused here)."""
    plan = json.loads(Path(args[0]).read_text())
    dist.init_process_group(backend=plan["backend"])
    device = _device(plan["backend"])
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    reading = {
        "node": node,
        "rank": dist.get_rank(),
        "compute_tflops": compute_tflops(device, plan["matmul_size"]),
        "memory_gbps": memory_gbps(device, plan["copy_bytes"]),
    }
    dist.barrier()
    links = _links(plan, device)
    readings: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(readings, {"reading": reading, "links": links})
    if dist.get_rank() == 0:
        names = {r["reading"]["rank"]: r["reading"]["node"] for r in readings}
        report = {
            "ranks": [r["reading"] for r in readings],
            "links": [
                {"nodes": [names[k] for k in link["ranks"]], "gbps": link["gbps"]}
                for r in readings
                for link in r["links"]
            ],
        }
        Path(plan["out"]).write_text(json.dumps(report, indent=2) + "\n")
    dist.barrier()
    dist.destroy_process_group()
