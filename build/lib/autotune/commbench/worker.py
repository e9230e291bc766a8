"""Run by torchrun for `autotune commbench`: times each collective over a range of message
sizes, for each group shape and NCCL variant the plan names, checks every result, and (rank 0)
times a plain memory copy for comparison.

NCCL reads NCCL_ALGO and NCCL_PROTO when a communicator is created, so each variant sets them
and then creates its own process groups; the default variant removes them.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = S / t with S the message size
(the full gathered or reduced buffer for all-gather and reduce-scatter), and busbw = algbw x
2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for
broadcast and send/recv: the bandwidth each link must carry, comparable across n.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from autotune.estimate.collectives import bus_factor
from autotune.trial.spec import NCCL_TUNED

TARGET_S = 0.25
"""Time spent timing one (op, size): more iterations for small messages, at least 3."""


def _case(
    op: str, size: int, group: dist.ProcessGroup, device: torch.device
) -> tuple[Callable, Callable]:
    """(run once, check the result) for `size` bytes of float32 on this rank of `group`."""
    buffers = _Buffers.of(size, group, device)
    make = _CASES.get(op)
    if make is None:
        raise ValueError(f"unknown collective {op}")
    return make(buffers)


@dataclass(frozen=True)
class _Buffers:
    """One (op, size)'s tensors on this rank: every rank fills its own with its rank + 1."""

    group: dist.ProcessGroup
    device: torch.device
    n: int
    rank: int
    count: int
    """Elements, divisible by n for the sharded collectives."""
    value: float
    total: float
    """The sum of every rank's value."""
    full: torch.Tensor
    shard: torch.Tensor
    out: torch.Tensor

    @classmethod
    def of(cls, size: int, group: dist.ProcessGroup, device: torch.device) -> _Buffers:
        n, rank = dist.get_world_size(group), dist.get_rank(group)
        count = max(n, size // 4 // n * n)
        value = float(rank + 1)
        return cls(
            group=group,
            device=device,
            n=n,
            rank=rank,
            count=count,
            value=value,
            total=n * (n + 1) / 2,
            full=torch.full((count,), value, device=device),
            shard=torch.empty(count // n, device=device),
            out=torch.empty(count, device=device),
        )

    def gathered(self) -> torch.Tensor:
        """Every rank's value in rank order, a shard each: what a gather or all-to-all
        leaves."""
        ranks = torch.arange(1, self.n + 1, device=self.device, dtype=torch.float32)
        return ranks.repeat_interleave(self.count // self.n)


def _all_reduce(b: _Buffers) -> tuple[Callable, Callable]:
    buf = b.full.clone()

    def run() -> None:
        buf.fill_(b.value)
        dist.all_reduce(buf, group=b.group)

    return run, lambda: bool(torch.all(buf == b.total))


def _all_gather(b: _Buffers) -> tuple[Callable, Callable]:
    mine = torch.full((b.count // b.n,), b.value, device=b.device)
    expected = b.gathered()
    return lambda: dist.all_gather_into_tensor(b.out, mine, group=b.group), lambda: bool(
        torch.equal(b.out, expected)
    )


def _reduce_scatter(b: _Buffers) -> tuple[Callable, Callable]:
    return lambda: dist.reduce_scatter_tensor(b.shard, b.full, group=b.group), lambda: bool(
        torch.all(b.shard == b.total)
    )


def _all_to_all(b: _Buffers) -> tuple[Callable, Callable]:
    send = torch.full((b.count,), b.value, device=b.device)
    expected = b.gathered()
    return lambda: dist.all_to_all_single(b.out, send, group=b.group), lambda: bool(
        torch.equal(b.out, expected)
    )


def _broadcast(b: _Buffers) -> tuple[Callable, Callable]:
    buf = b.full.clone()

    def run() -> None:
        buf.fill_(b.value)
        dist.broadcast(buf, group_src=0, group=b.group)

    return run, lambda: bool(torch.all(buf == 1.0))


def _send_recv(b: _Buffers) -> tuple[Callable, Callable]:
    """Ranks pair up: 0<->1, 2<->3, ...; an odd last rank idles."""
    peer = b.rank ^ 1
    buf = b.full.clone()

    def run() -> None:
        if peer >= b.n:
            return
        if b.rank % 2 == 0:
            dist.send(buf, group_dst=peer, group=b.group)
        else:
            dist.recv(buf, group_src=peer, group=b.group)

    received = float(b.rank) if b.rank % 2 == 1 else b.value  # the even partner's rank + 1
    return run, lambda: peer >= b.n or bool(torch.all(buf == received))


_CASES: dict[str, Callable[[_Buffers], tuple[Callable, Callable]]] = {
    "all_reduce": _all_reduce,
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all,
    "broadcast": _broadcast,
    "send_recv": _send_recv,
}
"""Each collective's (run once, check the result) maker."""


def _time(run: Callable[[], None], device: torch.device) -> float:
    """Median seconds of one call; every rank agrees on the iteration count. Groups of one
    shape run side by side, as a layout's TP or DP groups do."""
    run()
    dist.barrier()
    start = time.perf_counter()
    run()
    dist.barrier()
    once = time.perf_counter() - start
    guess = torch.tensor([once], dtype=torch.float64, device=device)
    dist.all_reduce(guess, op=dist.ReduceOp.MAX)
    iterations = int(max(3, min(200, TARGET_S / max(guess.item(), 1e-6))))
    times = []
    for _ in range(iterations):
        dist.barrier()
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    slowest = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a collective ends with its last rank
    return slowest.item()


def memcpy_bandwidth(size: int, device: torch.device) -> float:
    """Bytes per second of one local copy of `size` bytes (read + write counted once)."""
    src = torch.ones(size // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return size / statistics.median(times)


def group_members(shape: str, world: int, per_node: int) -> list[list[int]]:
    """Ranks of each group of a shape: `intra` = one node's ranks, `intra:K` = blocks of K
    adjacent ranks, `inter` = the same local rank on every node (how Megatron's rank order
    places TP of size K and, with tp = a node, DP)."""
    kind, _, size = shape.partition(":")
    if kind == "intra":
        block = int(size) if size else per_node
        return [list(range(start, start + block)) for start in range(0, world, block)]
    nodes = world // per_node
    return [[local + k * per_node for k in range(nodes)] for local in range(per_node)]


def _measure(
    op: str, size: int, group: dist.ProcessGroup, device: torch.device
) -> tuple[float, bool]:
    run, check = _case(op, size, group, device)
    seconds = _time(run, device)
    ok = torch.tensor([1 if check() else 0], device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return seconds, bool(ok.item())


def _set_variant(variant: dict[str, str]) -> None:
    for name in NCCL_TUNED:
        os.environ.pop(name, None)
    os.environ.update(variant)


def _variant_rows(
    plan: dict[str, Any], shape: str, op: str, variant: dict[str, str], device: torch.device
) -> list[dict[str, Any]]:
    """Every size of `op` on fresh groups of `shape` created under `variant`'s settings."""
    world, per_node = dist.get_world_size(), plan["devices_per_node"]
    _set_variant(variant)
    members = group_members(shape, world, per_node)
    group, _ = dist.new_subgroups_by_enumeration(members, backend=plan["backend"])
    n = dist.get_world_size(group)
    rows = []
    try:
        for size in plan["sizes"]:
            seconds, correct = _measure(op, size, group, device)
            algbw = size / seconds if n > 1 else None  # one rank moves no data over a link
            rows.append(
                {
                    "op": op,
                    "group": shape,
                    "ranks": n,
                    "nodes": world // per_node if shape == "inter" else 1,
                    "algo": variant.get("NCCL_ALGO", "default"),
                    "proto": variant.get("NCCL_PROTO", "default"),
                    "bytes": size,
                    "time_s": seconds,
                    "algbw_gbps": algbw / 1e9 if algbw is not None else None,
                    "busbw_gbps": algbw * bus_factor(op, n) / 1e9 if algbw is not None else None,
                    "correct": correct,
                }
            )
    finally:
        dist.destroy_process_group(group)
    return rows


def main(args: list[str], started: float) -> None:
    """Run the plan in the file `args[0]` (`autotune.rank` notes `started`; unused here)."""
    plan = json.loads(Path(args[0]).read_text())
    backend = plan["backend"]
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend=backend)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None
    device = device or torch.device("cpu")
    rows, refused = [], []
    for shape in plan["groups"]:
        for op in plan["ops"]:
            for variant in plan["variants"][op]:
                try:
                    rows += _variant_rows(plan, shape, op, variant, device)
                except dist.DistBackendError as exc:  # NCCL refuses a setting this fabric lacks
                    first_line = str(exc).strip().splitlines()[0]
                    refused.append({"op": op, "group": shape, **variant, "error": first_line})
    _set_variant({})
    if dist.get_rank() == 0:
        memcpy = memcpy_bandwidth(max(plan["sizes"]), device)
        report = {
            "backend": backend,
            "cluster": plan["cluster"],
            "ranks": dist.get_world_size(),
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))
            if backend == "nccl"
            else None,
            "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
            "memcpy_gbps": memcpy / 1e9,
            "rows": rows,
            "refused": refused,
        }
        Path(plan["out"]).write_text(json.dumps(report, indent=2) + "\n")
    dist.barrier()
    dist.destroy_process_group()
