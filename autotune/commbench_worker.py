"""Run by torchrun for `autotune commbench`: times each collective over a range of message
sizes, checks every result, and (rank 0) times a plain memory copy for comparison.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = S / t with S the message size
(the full gathered or reduced buffer for all-gather and reduce-scatter), and busbw = algbw x
2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for
broadcast and send/recv: the bandwidth each link must carry, comparable across n.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
TARGET_S = 0.25
"""Time spent timing one (op, size): more iterations for small messages, at least 3."""


def _case(
    op: str, size: int, n: int, rank: int, device: torch.device
) -> tuple[Callable, Callable]:
    """(run once, check the result) for `size` bytes of float32 on this rank."""
    count = max(n, size // 4 // n * n)  # divisible by n for the sharded collectives
    value = float(rank + 1)
    total = n * (n + 1) / 2
    full = torch.full((count,), value, device=device)
    shard = torch.empty(count // n, device=device)
    out = torch.empty(count, device=device)
    if op == "all_reduce":
        buf = full.clone()

        def run() -> None:
            buf.fill_(value)
            dist.all_reduce(buf)

        return run, lambda: bool(torch.all(buf == total))
    if op == "all_gather":
        mine = torch.full((count // n,), value, device=device)
        expected = torch.arange(1, n + 1, device=device, dtype=torch.float32).repeat_interleave(
            count // n
        )
        return lambda: dist.all_gather_into_tensor(out, mine), lambda: bool(
            torch.equal(out, expected)
        )
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(shard, full), lambda: bool(
            torch.all(shard == total)
        )
    if op == "all_to_all":
        send = torch.full((count,), value, device=device)
        expected = torch.arange(1, n + 1, device=device, dtype=torch.float32).repeat_interleave(
            count // n
        )
        return lambda: dist.all_to_all_single(out, send), lambda: bool(torch.equal(out, expected))
    if op == "broadcast":
        buf = full.clone()

        def run_broadcast() -> None:
            buf.fill_(value)
            dist.broadcast(buf, src=0)

        return run_broadcast, lambda: bool(torch.all(buf == 1.0))
    if op == "send_recv":  # ranks pair up: 0<->1, 2<->3, ...; an odd last rank idles
        peer = rank ^ 1
        buf = full.clone()

        def run_pair() -> None:
            if peer >= n:
                return
            if rank % 2 == 0:
                dist.send(buf, dst=peer)
            else:
                dist.recv(buf, src=peer)

        expected = float(rank) if rank % 2 == 1 else value  # the even partner's rank + 1
        return run_pair, lambda: peer >= n or bool(torch.all(buf == expected))
    raise ValueError(f"unknown collective {op}")


def _time(run: Callable[[], None], device: torch.device) -> float:
    """Median seconds of one call; every rank agrees on the iteration count."""
    run()
    dist.barrier()
    start = time.perf_counter()
    run()
    dist.barrier()
    once = time.perf_counter() - start
    guess = torch.tensor([once], dtype=torch.float64)
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
    slowest = torch.tensor([statistics.median(times)], dtype=torch.float64)
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


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    backend = plan["backend"]
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend=backend)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None
    device = device or torch.device("cpu")
    rank, n = dist.get_rank(), dist.get_world_size()
    rows = []
    for op in plan["ops"]:
        for size in plan["sizes"]:
            run, check = _case(op, size, n, rank, device)
            seconds = _time(run, device)
            ok = torch.tensor([1 if check() else 0])
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            algbw = size / seconds
            rows.append(
                {
                    "op": op,
                    "bytes": size,
                    "ranks": n,
                    "time_s": seconds,
                    "algbw_gbps": algbw / 1e9,
                    "busbw_gbps": algbw * BUS_FACTOR[op](n) / 1e9,
                    "correct": bool(ok.item()),
                }
            )
    if rank == 0:
        memcpy = memcpy_bandwidth(max(plan["sizes"]), device)
        report = {
            "backend": backend,
            "ranks": n,
            "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
            "memcpy_gbps": memcpy / 1e9,
            "rows": rows,
        }
        Path(plan["out"]).write_text(json.dumps(report, indent=2) + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
