"""Runs a command whose steps are read from its own log (Megatron-LM, torchtitan) as a trial.

A framework's rank module (`engines/megatron/job_worker.py`, `engines/torch/titan_worker.py`)
calls `main` with its `LogFormat`. The command (its flags rewritten for the trial, as the tuner
wrote it in command.json) runs in this process; everything it prints passes through unchanged
and each line is also read for the framework's step times and memory figures. The trial runs a
fixed number of steps. The rank that logs them measures them with the warm-up rule every trial
uses and, once the command has ended, writes the result; every rank writes the peak memory it
logged beside it.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from autotune.rank import failures, harness, job_hook
from autotune.rank.logged import Logged, LoggedMemory, LoggedStep
from autotune.rank.loss import known
from autotune.rank.measure import Memory, StepMeter, trial_result
from autotune.trial.result import TrialResult
from autotune.trial.spec import (
    METRICS_FILE,
    TrialSpec,
    read_command,
    read_json,
    write_atomically,
)


@dataclass(frozen=True)
class LogFormat:
    """How a framework's log tells its steps: the parser of one line, and which rank prints
    the step lines for a world size."""

    name: str
    parse_line: Callable[[str, TrialSpec], Logged]
    reporting_rank: Callable[[int], int]


class LineTap:
    """A text stream that passes everything to `stream` and hands each whole line to
    `on_line`; anything else (fileno, encoding, isatty) is the stream's."""

    def __init__(self, stream: TextIO, on_line: Callable[[str], None]) -> None:
        self._stream, self._on_line, self._partial = stream, on_line, ""

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._on_line(line)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class LoggedRun:
    """What one rank read from the framework's lines."""

    def __init__(
        self, fmt: LogFormat, spec: TrialSpec, folder: Path, rank: int, clock: dict[str, float]
    ):
        self.framework = fmt
        self.spec, self.folder, self.rank, self.clock = spec, folder, rank, clock
        self.reports = rank == self.framework.reporting_rank(spec.cluster.world_size)
        log = (folder / METRICS_FILE).open("a") if self.reports else None
        self.meter = StepMeter(spec.steps, torch.device("cpu"), log, collective=False)
        self.steps = 0
        self.peak: LoggedMemory | None = None
        self.losses: list[float] = []

    def read(self, line: str) -> None:
        for item in self.framework.parse_line(line, self.spec):
            if isinstance(item, LoggedStep):
                self.losses.append(math.nan if item.loss is None else item.loss)
                self._step(item.seconds)
            elif self.peak is None or item.peak_bytes > self.peak.peak_bytes:
                self.peak = item
                record = {"peak_bytes": item.peak_bytes, "kind": item.kind}
                write_atomically(self._memory_file(self.rank), json.dumps(record) + "\n")

    def _step(self, seconds: float) -> None:
        self.steps += 1
        if not self.reports or self.meter.done:
            return
        if self.steps == 1:
            self.clock["initialized"] = time.time() - seconds
        was_warm = self.meter.warmed_up
        self.meter.record(seconds)
        if self.meter.warmed_up and not was_warm:
            self.clock["warmed_up"] = self.meter.warmup_ended_at(time.time())
        if self.meter.done:  # written now: a failure in the framework's teardown loses nothing
            self.clock["measured"] = time.time()
            self.result().write(self.folder)

    def _memory_file(self, rank: int) -> Path:
        return self.folder / f"memory-rank{rank}.json"

    def result(self) -> TrialResult:
        """The trial's result, from this rank's steps and every rank's logged peak."""
        if self.meter.log is not None:
            self.meter.log.close()
        peaks = [
            record
            for rank in range(self.spec.cluster.world_size)
            if (record := read_json(self._memory_file(rank)))
        ]
        top = max(peaks, key=lambda r: r["peak_bytes"], default=None)
        memory = Memory(
            peak_bytes=top["peak_bytes"] if top else None,
            kind=top["kind"] if top else "not_logged",
        )
        meter = self.meter
        return trial_result(
            self.spec, meter.measured, len(meter.warmup), meter.stopped_for, memory, None,
            self.clock, known(self.losses),
        )  # fmt: skip


def check_nccl_environment(spec: TrialSpec, folder: Path, rank: int) -> None:
    """This rank runs with the trial's NCCL settings (there is no process group yet to
    compare ranks: each checks its own)."""
    if wrong := failures.nccl_mismatch(spec, failures.my_nccl_environment(), rank):
        failures.write_error(folder, rank, wrong)
        raise wrong


def main(log: LogFormat, args: list[str], started: float) -> None:
    """One trial of the command in command.json, its steps read from its log as `log` says."""
    spec, folder, rank, clock = harness.start(args, started)
    check_nccl_environment(spec, folder, rank)
    run = LoggedRun(log, spec, folder, rank, clock)
    sys.stdout = LineTap(sys.stdout, run.read)
    sys.stderr = LineTap(sys.stderr, run.read)
    argv = read_command(folder)
    job_hook.run_for_trial(argv, spec, folder, rank, lambda: run.steps if run.reports else None)
    if run.reports and not run.meter.done:
        plan = spec.steps
        ended = (
            job_hook.too_few_steps(run.steps, plan.min_warmup + plan.min_measured)
            if run.steps
            else failures.NoStepsError(
                f"no {log.name} step line was read from rank {rank}'s output: the command "
                "printed none in the format autotune reads (see README)"
            )
        )
        failures.write_error(folder, rank, ended)
        raise ended
    harness.exit_now()
