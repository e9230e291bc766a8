"""The part of every engine's worker that is not engine-specific.

torchrun starts `python -m autotune.engines.<engine>_worker trial.json` on every rank. The
engine builds a `Session`; this harness warms it up until step time settles, measures steps,
profiles one, tallies model states, and writes `metrics.jsonl` and `result.json`. A rank that
fails writes `error-rank<N>.json` with the kind of failure before it exits.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the heavy imports, so import time is measured

import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Protocol  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from autotune.lifetime import die_with_parent  # noqa: E402
from autotune.trialspec import (  # noqa: E402
    FAULT_ENV,
    LAUNCH_EPOCH_ENV,
    METRICS_FILE,
    NCCL_TUNED,
    RESULT_FILE,
    TrialSpec,
    nccl_environment,
    write_atomically,
)


@dataclass
class StateTally:
    """Model-state bytes summed from real tensors, each tensor counted once."""

    bytes: dict[str, int] = field(
        default_factory=lambda: {"params": 0, "grads": 0, "optimizer": 0}
    )
    _seen: set[tuple[int, int]] = field(default_factory=set)

    def add(self, kind: str, tensor: torch.Tensor | None) -> None:
        if tensor is None or not torch.is_tensor(tensor):
            return
        if hasattr(tensor, "to_local"):  # DTensor: this rank holds only its shard
            tensor = tensor.to_local()
        if tensor.numel() == 0:
            return
        key = (tensor.data_ptr(), tensor.numel())
        if key not in self._seen:
            self._seen.add(key)
            self.bytes[kind] += tensor.numel() * tensor.element_size()

    def add_optimizer(self, optimizer: torch.optim.Optimizer, params_kind: str) -> None:
        """Optimizer states, and the parameters the optimizer updates with their gradients.

        `params_kind` says what those parameters are: the model's own (sharded) parameters
        ("params", e.g. FSDP2) or fp32 master copies ("optimizer", e.g. ZeRO 1-2).
        """
        for state in optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value) and value.dim() > 0:
                    self.add("optimizer", value)
        for group in optimizer.param_groups:
            for param in group["params"]:
                self.add(params_kind, param)
                self.add("grads", param.grad)

    @property
    def total(self) -> int:
        return sum(self.bytes.values())


class Session(Protocol):
    """One engine's model, optimizer and data, ready to run optimizer steps."""

    device: torch.device

    def step(self, observe: Callable[[], None] | None = None) -> None:
        """One optimizer step over this rank's share of the global batch.

        `observe` runs wherever this engine's model states may peak (after each backward; for
        engines that hold unsharded parameters between forward and backward, after forward
        too), so the harness can tally them.
        """

    def model_state(self) -> StateTally:
        """Parameters, gradients and optimizer states this rank holds now."""


def main(build: Callable[[TrialSpec, Path], Session]) -> None:
    """Entry point of an engine's worker module."""
    die_with_parent()
    _clear_stale_build_locks()
    trial_file = Path(sys.argv[1])
    folder = trial_file.parent
    spec = TrialSpec.from_json(trial_file.read_text())
    rank = int(os.environ.get("RANK", "0"))
    clock = {
        "launched": float(os.environ.get(LAUNCH_EPOCH_ENV, STARTED)),
        "started": STARTED,
        "imported": time.time(),
    }
    try:
        session = build(spec, folder)
        check_nccl_environment(spec, rank)
        clock["initialized"] = time.time()
        result = _run(spec, session, folder, rank, clock)
        if rank == 0:
            write_atomically(folder / RESULT_FILE, json.dumps(result, indent=2) + "\n")
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as exc:
        _write_error(folder, rank, exc)
        raise


def _run(
    spec: TrialSpec, session: Session, folder: Path, rank: int, clock: dict[str, float]
) -> dict[str, Any]:
    plan = spec.steps
    log = (folder / METRICS_FILE).open("a") if rank == 0 else None
    _maybe_inject_fault(rank)

    def timed_step(phase: str, index: int, observe: Callable[[], None] | None = None) -> float:
        _sync(session.device)
        start = time.perf_counter()
        session.step(observe)
        _sync(session.device)
        seconds = time.perf_counter() - start
        if log is not None:
            log.write(json.dumps({"phase": phase, "step": index, "step_time_s": seconds}) + "\n")
            log.flush()
        return seconds

    warmup: list[float] = []
    while True:
        warmup.append(timed_step("warmup", len(warmup)))
        if _agree(
            _settled(
                warmup, plan.min_warmup, plan.max_warmup, plan.settle_window, plan.settle_tolerance
            ),
            session.device,
        ):
            break
    clock["warmed_up"] = time.time()

    # Model states peak at different moments per engine and stage (ZeRO-1 holds full gradients
    # during accumulation, ZeRO-2 only partitions): tally at each observed point, keep the largest.
    tally: list[StateTally] = []
    measured = [
        timed_step(
            "measured",
            i,
            (lambda: tally.append(session.model_state()))
            if i == plan.measured_steps - 1
            else None,
        )
        for i in range(plan.measured_steps)
    ]
    clock["measured"] = time.time()
    profile = _profiled_step(session) if plan.profile else None
    clock["profiled"] = time.time()

    slowest = _max_over_ranks(measured, session.device)  # a step ends when its slowest rank does
    largest = max(tally, key=lambda t: t.total)
    states = _gather_ints(largest.total, session.device)
    peak = _gather_ints(_peak_memory_bytes(session.device), session.device)
    if log is not None:
        log.close()
    return _result(spec, slowest, states, largest, max(peak), len(warmup), profile, clock)


def _result(
    spec: TrialSpec,
    step_times: list[float],
    states: list[int],
    tally: StateTally,
    peak: int,
    warmup_steps: int,
    profile: dict[str, float] | None,
    clock: dict[str, float],
) -> dict[str, Any]:
    median = statistics.median(step_times)
    w, cluster = spec.workload, spec.cluster
    flops = w.model_flops_per_step() / median / cluster.world_size
    peak_flops = cluster.device.peak_flops.get(w.precision)
    clock["finished"] = time.time()
    marks = list(clock.items())
    return {
        "status": "ok",
        "source": "measured",
        "step_time_s": median,
        "step_time_min_s": min(step_times),
        "step_time_max_s": max(step_times),
        "step_time_stdev_s": statistics.stdev(step_times) if len(step_times) > 1 else 0.0,
        "step_times_s": step_times,
        "tokens_per_s": w.tokens_per_step / median,
        "tflops_per_device": flops / 1e12,
        "mfu": flops / peak_flops if peak_flops else None,
        "flop_formula": "megatron-core num_floating_point_operations (model FLOPs, no recompute)",
        "peak_memory_bytes": peak,
        "peak_memory_kind": "cuda_max_allocated" if torch.cuda.is_available() else "max_rss",
        "model_state_bytes": max(states),
        "model_state_bytes_per_rank": states,
        "model_state_breakdown_rank0": dict(tally.bytes),
        "profile": profile,
        "warmup_steps": warmup_steps,
        "measured_steps": len(step_times),
        "world_size": cluster.world_size,
        "phases_s": {
            later: t1 - t0 for (_, t0), (later, t1) in zip(marks, marks[1:], strict=False)
        },
        "versions": {"torch": torch.__version__},
        "nccl_version": (
            ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
        ),
    }


def _settled(times: list[float], min_n: int, max_n: int, window: int, tolerance: float) -> bool:
    if len(times) >= max_n:
        return True
    if len(times) < max(min_n, window):
        return False
    last = times[-window:]
    return (max(last) - min(last)) <= tolerance * statistics.median(last)


def _agree(decision: bool, device: torch.device) -> bool:
    """Rank 0's decision, so that every rank runs the same number of steps."""
    flag = torch.tensor([1 if decision else 0], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def _max_over_ranks(values: list[float], device: torch.device) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def _gather_ints(value: int, device: torch.device) -> list[int]:
    mine = torch.tensor([value], dtype=torch.int64, device=device)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [int(t.item()) for t in every]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


COMM_MARKERS = ("gloo:", "nccl", "c10d::")


def _profiled_step(session: Session) -> dict[str, float]:
    """One step under torch.profiler: time inside collectives (their union) against the rest."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if session.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        _sync(session.device)
        start = time.perf_counter()
        session.step()
        _sync(session.device)
        wall = time.perf_counter() - start
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if any(marker in e.name.lower() for marker in COMM_MARKERS)
    )
    comm_us = 0.0
    end = float("-inf")
    for lo, hi in spans:  # length of the union of intervals
        if hi > end:
            comm_us += hi - max(lo, end)
            end = hi
    comm = min(comm_us / 1e6, wall)
    return {"step_time_s": wall, "comm_s": comm, "compute_s": wall - comm}


STALE_BUILD_LOCK_S = 600
"""A JIT build of an engine's ops (DeepSpeed's) takes a minute or two; a lock this old was
left by a trial killed mid-build, and would make every later trial wait on it forever."""


def _clear_stale_build_locks() -> None:
    root = Path(
        os.environ.get("TORCH_EXTENSIONS_DIR", Path.home() / ".cache" / "torch_extensions")
    )
    now = time.time()
    for lock in root.glob("*/*/lock"):
        with contextlib.suppress(OSError):
            if now - lock.stat().st_mtime > STALE_BUILD_LOCK_S:
                lock.unlink()


def check_nccl_environment(spec: TrialSpec, rank: int) -> None:
    """Every rank must run with the NCCL settings the trial chose: a variable set differently
    on one node silently changes what is measured, or hangs the collective."""
    if os.environ.get(FAULT_ENV) == "nccl_env" and rank == 1:
        os.environ["NCCL_ALGO"] = "Tree"  # test hook: one rank with a setting of its own
    expected = nccl_environment(spec)
    mine = {name: os.environ.get(name) for name in NCCL_TUNED}
    everyone: list[dict[str, str | None]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(everyone, mine)
    for other, env in enumerate(everyone):
        for name in NCCL_TUNED:
            value = expected.get(name)
            if env[name] != value:
                raise LaunchEnvironmentError(
                    f"{name} is {env[name] or 'unset'} on rank {other} but the trial sets it "
                    f"{value or 'unset'}: every rank must run with the trial's NCCL settings"
                )


def _maybe_inject_fault(rank: int) -> None:
    fault = os.environ.get(FAULT_ENV)
    if rank != 0 or not fault:
        return
    if fault == "hang":
        time.sleep(10**6)
    if fault == "crash":
        raise RuntimeError("injected crash (AUTOTUNE_INJECT_FAULT=crash)")
    if fault == "oom":
        raise torch.OutOfMemoryError("injected out of memory (AUTOTUNE_INJECT_FAULT=oom)")


class LaunchEnvironmentError(RuntimeError):
    """The ranks were started with an environment the trial did not ask for."""


def classify_exception(exc: BaseException) -> str:
    """oom, launch_error, comm_error or crash, from the exception a rank died of."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return "oom"
    if isinstance(exc, LaunchEnvironmentError):
        return "launch_error"
    text = str(exc)
    if isinstance(exc, dist.DistError) or any(
        marker in text
        for marker in ("gloo", "NCCL", "Connection closed by peer", "Connection reset")
    ):
        return "comm_error"
    return "crash"


def _write_error(folder: Path, rank: int, exc: BaseException) -> None:
    lines = str(exc).strip().splitlines()
    record = {
        "rank": rank,
        "kind": classify_exception(exc),
        "time": time.time(),
        "error": f"{type(exc).__name__}: {lines[0] if lines else ''}".strip(),
    }
    write_atomically(folder / f"error-rank{rank}.json", json.dumps(record) + "\n")
