"""How a trial measures: warm-up until step times settle, measured steps, the slowest rank,
peak memory, model states from real tensors, and the split of a profiled step into time in
collectives and the rest. Shared by autotune's own workers and the hook in a user's loop."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import torch
import torch.distributed as dist

from autotune.rank.loss import over_ranks
from autotune.specs.throughput import throughput
from autotune.trial import length
from autotune.trial.result import TrialResult
from autotune.trial.spec import StepPlan, TrialSpec


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


class StepMeter:
    """Warm-up until step time settles (every rank follows rank 0's decision), then measured
    steps until `trial.length` says the step time is known well enough: the one set of
    statistics for autotune's own loop, for the hook in a user's, and for the step times a
    framework logs (there one rank decides alone: `collective=False`)."""

    def __init__(
        self, plan: StepPlan, device: torch.device, log: TextIO | None, collective: bool = True
    ) -> None:
        self.plan, self.device, self.log, self.collective = plan, device, log, collective
        self.warmup: list[float] = []
        self.measured: list[float] = []
        self.warmed_up = False
        self.done = False
        self.stopped_for: length.StoppedFor | None = None
        self.carried = 0
        """Warm-up steps counted as measured: the settled window, once it is stable."""
        self.ending: length.StoppedFor | None = None
        """Why to stop as soon as `min_measured` steps are measured (`end_early`)."""

    def end_early(self, why: length.StoppedFor) -> None:
        """Stop once the fewest measured steps are in: the trial's verdict is known already
        (every rank asks it at the same step)."""
        self.ending = why

    @property
    def tally_next(self) -> bool:
        """The next step recorded is the first one timed after warm-up: model states are
        tallied there (they stay the same size from then on)."""
        return self.warmed_up and len(self.measured) == self.carried

    def record(self, seconds: float) -> None:
        phase, steps = ("measured", self.measured) if self.warmed_up else ("warmup", self.warmup)
        if self.log is not None:
            entry = {"phase": phase, "step": len(steps), "step_time_s": seconds}
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()
        steps.append(seconds)
        if not self.warmed_up:
            ended = self._agreed(_warmup_end(self.warmup, self.plan))
            self.warmed_up = ended != NOT_YET
            if ended in (STABLE, ROSE):  # its settled window is steady state already: keep it
                plan = self.plan
                window = plan.settle_window if ended == STABLE else 1
                self.carried = max(0, min(window, plan.min_measured - 1, plan.measured_steps - 1))
                self.measured = self.warmup[len(self.warmup) - self.carried :]
                del self.warmup[len(self.warmup) - self.carried :]
        else:
            lead = self._agreed(_still_warming(self.measured, len(self.warmup), self.plan))
            if lead:  # the transient outlasted warm-up: its steps were not steady state
                self.warmup += self.measured[:lead]
                del self.measured[:lead]
                self.carried = max(0, self.carried - lead)
            self.stopped_for = length.stopped_for(self.measured, self.plan)
            if self.ending is not None and len(self.measured) >= self.plan.min_measured:
                self.stopped_for = self.ending
            self.done = self._decided(self.stopped_for is not None)

    def warmup_ended_at(self, now: float) -> float:
        """When warm-up ended, in `time.time()` terms, called as it ends: the steps it carried
        over are measured steps, and their time is time spent measuring."""
        return now - sum(self.measured[: self.carried])

    def wants_profile(self) -> bool:
        """Whether to profile one more step: asked of every rank at once, after measuring.
        A trial that spans nodes is profiled even where it cannot win: its profile is what
        shows a slow node (`node_compute_s`)."""
        plan = self.plan
        could_win = plan.best_s is None or statistics.median(self.measured) <= plan.best_s * (
            1 + plan.precision
        )
        wanted = could_win or spans_nodes()
        return self._decided(plan.profile and wanted and self.ending is None)

    def _decided(self, decision: bool) -> bool:
        return bool(self._agreed(int(decision)))

    def _agreed(self, code: int) -> int:
        return _agree(code, self.device) if self.collective else code


def summarize(
    spec: TrialSpec,
    meter: StepMeter,
    tally: StateTally,
    profile: dict[str, float] | None,
    clock: dict[str, float],
    losses: list[float] | None = None,
) -> TrialResult:
    """The trial's result from every rank's measurements (a collective: all ranks call it);
    `losses`: this rank's loss of each step, where the loop's hook read them."""
    states = _gather_ints(tally.total, meter.device)
    slowest = _max_over_ranks(meter.measured, meter.device)  # a step ends with its slowest rank
    return trial_result(
        spec,
        step_times=slowest,
        warmup_steps=len(meter.warmup),
        stopped_for=meter.stopped_for,
        memory=Memory(
            peak_bytes=max(_gather_ints(_peak_memory_bytes(meter.device), meter.device)),
            kind="cuda_max_allocated" if torch.cuda.is_available() else "max_rss",
            model_state_bytes_per_rank=states,
            breakdown_rank0=dict(tally.bytes),
        ),
        profile=profile,
        clock=clock,
        losses=over_ranks(losses, meter.device) if losses else (),
        node_compute_s=node_compute_s(profile) if spans_nodes() else {},
    )


def spans_nodes() -> bool:
    """Whether this trial's ranks run on more than one node (torchrun's LOCAL_WORLD_SIZE
    below the world's)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    return int(os.environ.get("LOCAL_WORLD_SIZE", world)) < world


def node_name() -> str:
    """This rank's node: SLURM's name for it, or the host's."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def node_compute_s(profile: dict[str, float] | None) -> dict[str, float]:
    """Each node's compute time in the profiled step (outside collectives), read by its
    slowest rank; {} where the step was not profiled (a collective: all ranks call it)."""
    mine = (node_name(), profile["compute_s"] if profile else None)
    every: list[tuple[str, float | None]] = [("", None)] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    by_node: dict[str, float] = {}
    for node, seconds in every:
        if seconds is None:
            return {}
        by_node[node] = max(seconds, by_node.get(node, 0.0))
    return by_node


@dataclass(frozen=True)
class Memory:
    """What a trial knows of its memory: the peak, how it was read, and model states."""

    peak_bytes: int | None
    kind: str
    model_state_bytes_per_rank: list[int] = field(default_factory=list)
    breakdown_rank0: dict[str, int] = field(default_factory=dict)


def trial_result(
    spec: TrialSpec,
    step_times: list[float],
    warmup_steps: int,
    stopped_for: str | None,
    memory: Memory,
    profile: dict[str, float] | None,
    clock: dict[str, float],
    losses: tuple[float, ...] = (),
    node_compute_s: dict[str, float] | None = None,
) -> TrialResult:
    """The result of a measured trial, from its slowest-rank step times and, where known,
    the loss of each step from the first and each node's compute time."""
    median = statistics.median(step_times)
    w, cluster = spec.workload, spec.cluster
    rate = throughput(w, cluster, median)
    clock["finished"] = time.time()
    marks = list(clock.items())
    states = memory.model_state_bytes_per_rank
    return TrialResult(
        source="measured",
        step_time_s=median,
        step_time_min_s=min(step_times),
        step_time_max_s=max(step_times),
        step_time_stdev_s=statistics.stdev(step_times) if len(step_times) > 1 else 0.0,
        step_times_s=tuple(step_times),
        tokens_per_s=rate.tokens_per_s,
        tflops_per_device=rate.tflops_per_device,
        mfu=rate.mfu,
        flop_formula="megatron-core num_floating_point_operations (model FLOPs, no recompute)",
        peak_memory_bytes=memory.peak_bytes,
        peak_memory_kind=memory.kind,
        model_state_bytes=max(states) if states else None,
        model_state_bytes_per_rank=tuple(states),
        model_state_breakdown_rank0=dict(memory.breakdown_rank0),
        profile=profile,
        warmup_steps=warmup_steps,
        measured_steps=len(step_times),
        stopped_for=stopped_for,
        interval=length.relative_halfwidth(step_times) if len(step_times) > 1 else None,
        world_size=cluster.world_size,
        phases_s={later: t1 - t0 for (_, t0), (later, t1) in zip(marks, marks[1:], strict=False)},
        versions={"torch": torch.__version__},
        losses=losses,
        node_compute_s=dict(node_compute_s or {}),
        nccl_version=(
            ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
        ),
    )


NOT_YET, CAPPED, STABLE, ROSE = 0, 1, 2, 3
"""How warm-up stands after a step: going on; ended at its cap; ended with its last
`settle_window` steps steady (those then count as the first measured ones); or ended by a
step slower than the ones before it by more than the tolerance (only that one counts: the
step before may still have been warming up)."""


def _warmup_end(times: list[float], plan: StepPlan) -> int:
    """Warm-up is a falling transient (first steps slow: allocation, tracing, caches): it is
    over once the last step is no longer faster than the steps before it. Asking two noisy
    steps to agree instead would spend several steady-state steps per trial on a noisy
    host."""
    if len(times) < plan.min_warmup:
        return NOT_YET
    before = times[-plan.settle_window : -1]
    if len(times) >= plan.settle_window:
        if not before:
            return STABLE
        level = statistics.median(before)
        if times[-1] > (1 + plan.settle_tolerance) * level:
            return ROSE
        if times[-1] >= (1 - plan.settle_tolerance) * level:
            return STABLE
    if len(times) >= plan.max_warmup or sum(times) >= plan.max_warmup_s:
        return CAPPED
    return NOT_YET


def _still_warming(measured: list[float], warmup_steps: int, plan: StepPlan) -> int:
    """How many leading measured steps were still warm-up: each slower than the median of
    the steps after it by more than the settle tolerance. A fork's or a pool's first steps
    can fall in two stages (two slow steps that agree end warm-up, then steps drop); counted
    as measured they read the config slow and widen its interval until the step cap."""
    lead = 0
    while (
        len(measured) - lead > 2
        and warmup_steps + lead < plan.max_warmup
        and measured[lead] > (1 + plan.settle_tolerance) * statistics.median(measured[lead + 1 :])
    ):
        lead += 1
    return lead


def _agree(code: int, device: torch.device) -> int:
    """Rank 0's decision, so that every rank runs the same number of steps."""
    flag = torch.tensor([code], device=device)
    dist.broadcast(flag, src=0)
    return int(flag.item())


def _max_over_ranks(values: list[float], device: torch.device) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def _gather_ints(value: int, device: torch.device) -> list[int]:
    mine = torch.tensor([value], dtype=torch.int64, device=device)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [int(t.item()) for t in every]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    with contextlib.suppress(OSError):  # VmHWM, which reset_peak_memory can lower, on Linux
        for line in Path(PROC_STATUS).read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


PROC_STATUS = "/proc/self/status"
PROC_CLEAR_REFS = "/proc/self/clear_refs"


def reset_peak_memory(device: torch.device) -> None:
    """Start a trial's peak from what the process holds now, not from an earlier trial's
    peak in the same process (a warm pool's): CUDA's allocator statistics, or the kernel's
    resident high-water mark (writing 5 to clear_refs resets VmHWM, Linux 4.0+)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    with contextlib.suppress(OSError):
        Path(PROC_CLEAR_REFS).write_text("5")


COMM_MARKERS = ("gloo:", "nccl", "c10d::")


def profiler(device: torch.device) -> torch.profiler.profile:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities)


def profile_summary(prof: torch.profiler.profile, wall: float) -> dict[str, float]:
    """Time inside collectives (the union of their spans) against the rest of a step.

    Read from the profiler's raw events: building its event tree (`prof.events()`) takes
    longer than a tiny model's step itself."""
    results = prof.profiler.kineto_results if prof.profiler is not None else None
    events = results.events() if results is not None else []
    spans = sorted(
        (e.start_ns(), e.start_ns() + e.duration_ns())
        for e in events
        if any(marker in e.name().lower() for marker in COMM_MARKERS)
    )
    comm_ns = 0
    end = -1
    for lo, hi in spans:  # length of the union of intervals
        if hi > end:
            comm_ns += hi - max(lo, end)
            end = hi
    comm = min(comm_ns / 1e9, wall)
    return {"step_time_s": wall, "comm_s": comm, "compute_s": wall - comm}
