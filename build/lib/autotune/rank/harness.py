"""The part of every engine's worker that is not engine-specific.

torchrun starts `python -m autotune.rank autotune.engines.<engine>.worker trial.json` on every
rank. The engine builds a `Session`; this harness warms it up until step time settles, measures
steps, profiles one, tallies model states, and writes `metrics.jsonl` and `result.json`. A rank
that fails writes `error-rank<N>.json` with the kind of failure before it exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn, Protocol

import torch
import torch.distributed as dist

from autotune.rank import build_lock, shared_buffers
from autotune.rank.failures import check_nccl_environment, write_error
from autotune.rank.faults import maybe_inject_fault
from autotune.rank.measure import (
    StateTally,
    StepMeter,
    profile_summary,
    profiler,
    summarize,
    sync,
)
from autotune.trial.lifetime import die_with_parent
from autotune.trial.result import TrialResult
from autotune.trial.spec import (
    LAUNCH_EPOCH_ENV,
    METRICS_FILE,
    TrialSpec,
)


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


Build = Callable[[TrialSpec, Path], Session]


def main(build: Build, args: list[str], started: float) -> None:
    """What an engine's worker module runs (`autotune.rank`'s `main(args, started)`): one
    trial, then the process ends."""
    spec, folder, rank, clock = start(args, started)
    result = run_trial(build, spec, folder, rank, clock)
    finish(folder, rank, result)


def run_trial(
    build: Build, spec: TrialSpec, folder: Path, rank: int, clock: dict[str, float]
) -> TrialResult:
    """Build the engine's session and measure it; a failure is written to
    `error-rank<N>.json` with its kind before it propagates. The session is unreachable
    once this returns, so a warm pool's next trial starts from none of its state."""
    try:
        session = build(spec, folder)
        check_nccl_environment(spec, rank)
        clock["initialized"] = time.time()
        return _run(spec, session, folder, rank, clock)
    except BaseException as exc:
        write_error(folder, rank, exc)
        raise


def start(args: list[str], started: float) -> tuple[TrialSpec, Path, int, dict[str, float]]:
    """What every worker does first: the trial it runs (`args`: the trial file), its folder,
    its rank, and the clock that splits the trial's wall time into phases (`started`: when
    `autotune.rank` began, before the heavy imports)."""
    die_with_parent()
    trial_file = Path(args[0]).resolve()
    spec = TrialSpec.from_json(trial_file.read_text())
    clock = {
        "launched": float(os.environ.get(LAUNCH_EPOCH_ENV, started)),
        "started": started,
        "imported": time.time(),
    }
    rank = int(os.environ.get("RANK", "0"))
    settle_build_locks(trial_file.parent, rank)
    return spec, trial_file.parent, rank, clock


def exit_now(code: int = 0) -> NoReturn:
    """End the rank with `code` (0: done) without running interpreter and C++ static
    teardown.

    DeepSpeed's clone of the world group (`deepspeed.utils.groups._clone_world_group`) stays
    alive inside torch after every Python reference to it and `destroy_process_group` are
    gone, and its gloo threads keep running while the process exits. Now and then one of
    them meets a destroyed static and the rank aborts ("terminate called without an active
    exception", SIGABRT) after its result was written, failing the trial's launch.sh and
    the exported train.sh. Everything this rank had to say is on disk by now; DeepSpeed's
    CPU allreduce buffers are unlinked (`shared_buffers`).
    """
    shared_buffers.release()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextlib.contextmanager
def output_to(log: str) -> Iterator[None]:
    """This process's stdout and stderr appended to a trial's log while it runs there (a
    pool's rank), as a one-trial launch writes there."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for target, fd in zip((1, 2), saved, strict=True):
            os.dup2(fd, target)
            os.close(fd)


def _run(
    spec: TrialSpec, session: Session, folder: Path, rank: int, clock: dict[str, float]
) -> TrialResult:
    log = (folder / METRICS_FILE).open("a") if rank == 0 else None
    meter = StepMeter(spec.steps, session.device, log)
    maybe_inject_fault(rank)

    def timed_step(observe: Callable[[], None] | None = None) -> float:
        sync(session.device)
        start = time.perf_counter()
        session.step(observe)
        sync(session.device)
        return time.perf_counter() - start

    while not meter.warmed_up:
        meter.record(timed_step())
    clock["warmed_up"] = meter.warmup_ended_at(time.time())
    # Model states peak at different moments per engine and stage (ZeRO-1 holds full gradients
    # during accumulation, ZeRO-2 only partitions): tally at each observed point, keep the largest.
    tally: list[StateTally] = []
    while not meter.done:
        observe = (lambda: tally.append(session.model_state())) if meter.tally_next else None
        meter.record(timed_step(observe))
    clock["measured"] = time.time()
    profile = _profiled_step(session) if meter.wants_profile() else None
    clock["profiled"] = time.time()
    if log is not None:
        log.close()
    return summarize(spec, meter, max(tally, key=lambda t: t.total), profile, clock)


def finish(folder: Path, rank: int, result: TrialResult) -> None:
    """Rank 0 writes the result; every rank leaves the process groups and exits."""
    if rank == 0:
        result.write(folder)
    dist.barrier()
    dist.destroy_process_group()
    exit_now()


def _profiled_step(session: Session) -> dict[str, float]:
    """One step under torch.profiler: time inside collectives against the rest."""
    with profiler(session.device) as prof:
        sync(session.device)
        start = time.perf_counter()
        session.step()
        sync(session.device)
        wall = time.perf_counter() - start
    return profile_summary(prof, wall)


def settle_build_locks(folder: Path, rank: int) -> None:
    """No op load waits for ever on a build lock a killed build left (`build_lock.py`); one
    that may be stale and cannot be cleared fails the trial with one line."""
    try:
        build_lock.settle()
    except build_lock.BuildLockError as exc:
        write_error(folder, rank, exc, kind="launch_error")
        raise
