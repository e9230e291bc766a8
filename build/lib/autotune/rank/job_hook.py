"""Measuring the user's own training loop from inside it, and running their command.

A job worker installs a `StepHook`, then runs the user's script or module in its own process
with `runpy`. The hook is told at the end of each optimizer step (by a wrapper around the
framework's step, or by the user's call to `autotune.step.done()`), times the interval since
the previous one (the user's data loading, forward, backward and step), warms up, measures
and profiles with autotune's own statistics (`measure.StepMeter`), writes the result and ends
the ranks: the script's training stops there.
"""

from __future__ import annotations

import dataclasses
import os
import runpy
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from autotune.rank import failures, faults, harness, measure
from autotune.rank.loss import StepLoss, Watch, reseed_after_first_step, seed_everything
from autotune.rank.model_shape import ModelShape
from autotune.trial.spec import METRICS_FILE, TrialSpec, read_command

STARTUP_FAILURES = (SyntaxError, ImportError, FileNotFoundError, NameError)
"""Exceptions before the first step that say the script cannot run at all, whatever the
config: reported as script errors, and the study stops on them."""

States = Callable[[], measure.StateTally]


def _nothing() -> None:
    return None


def _unknown_states() -> measure.StateTally:
    """A script's own loop: autotune does not know where its model states live."""
    return measure.StateTally()


class StepHook:
    """Told at the end of each optimizer step of the user's loop."""

    def __init__(self, spec: TrialSpec, folder: Path, rank: int, clock: dict[str, float]):
        self.spec, self.folder, self.rank, self.clock = spec, folder, rank, clock
        self.meter: measure.StepMeter | None = None
        self.steps = 0
        self.last_end = 0.0
        self.tally: measure.StateTally | None = None
        self.profiling: torch.profiler.profile | None = None
        self.model_shape: ModelShape | None = None
        """The model's shape, where the framework's hook can read it (DeepSpeed)."""
        self.loss = StepLoss()
        """Each step's loss, as the framework's hook or `autotune.step.done` tells it."""
        self.watch: Watch | None = None
        """The loss against the user's config's, where the trial was given it."""

    def before_step(self, states: States) -> None:
        """Where the framework lets the hook in before its optimizer step (gradients are
        still held): model states are tallied there on the first measured step."""
        if self.meter is not None and self.meter.tally_next:
            self.tally = states()

    def after_step(self, device: torch.device, check: Callable[[], None], states: States) -> None:
        """`check` raises when the script does not run the trial's config (first step);
        `states` tallies the rank's model states."""
        measure.sync(device)
        now = time.perf_counter()
        self.steps += 1
        self.loss.end_step()
        self._watch(device)
        if self.meter is None:
            self._first_step(device, check)
        elif self.profiling is not None:
            self._finish(now)
        else:
            self._record(now - self.last_end, states)
        measure.sync(device)
        self.last_end = time.perf_counter()

    def _watch(self, device: torch.device) -> None:
        """The step's loss against the user's config's (a collective, outside the timed
        interval); once it has left it, the trial ends as soon as its speed is measured."""
        if not self.spec.parity.reference or not dist.is_initialized():
            return
        if self.watch is None:
            self.watch = Watch(self.spec.parity, device)
        self.watch.step_ended(self.steps, self.loss.curve[-1])
        if self.watch.over_at is not None and self.meter is not None:
            self.meter.end_early("differs")

    def step_done(self, loss: object = None) -> None:
        """`autotune.step.done(loss=...)` from the user's loop: nothing to check, no states
        known; the step's loss where the user gave it."""
        if loss is not None:
            self.loss.set_step(loss)
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.after_step(device, check=_nothing, states=_unknown_states)

    def _first_step(self, device: torch.device, check: Callable[[], None]) -> None:
        if not dist.is_initialized():
            raise failures.ScriptError(
                "the script took an optimizer step without torch.distributed: it must call "
                "init_process_group (DeepSpeed and the Trainer do) before training"
            )
        check()
        failures.check_nccl_environment(self.spec, self.rank)
        self.clock["initialized"] = time.time()
        log = (self.folder / METRICS_FILE).open("a") if self.rank == 0 else None
        self.meter = measure.StepMeter(self.spec.steps, device, log)
        faults.maybe_inject_fault(self.rank)

    def _record(self, seconds: float, states: States) -> None:
        assert self.meter is not None
        was_warm = self.meter.warmed_up
        self.meter.record(seconds)
        if self.meter.warmed_up and not was_warm:
            self.clock["warmed_up"] = self.meter.warmup_ended_at(time.time())
        if not self.meter.done:
            return
        self.clock["measured"] = time.time()
        if self.tally is None:  # no hook before the step: the states after it
            self.tally = states()
        if self.meter.wants_profile():
            self.profiling = measure.profiler(self.meter.device)
            self.profiling.start()
        else:
            self._write_and_exit(None)

    def _finish(self, now: float) -> None:
        assert self.profiling is not None
        self.profiling.stop()
        self.clock["profiled"] = time.time()
        self._write_and_exit(measure.profile_summary(self.profiling, now - self.last_end))

    def _write_and_exit(self, profile: dict[str, float] | None) -> None:
        assert self.meter is not None and self.tally is not None
        if self.meter.log is not None:
            self.meter.log.close()
        result = measure.summarize(
            self.spec, self.meter, self.tally, profile, self.clock, self.loss.curve
        )
        if self.model_shape is not None:
            result = dataclasses.replace(result, model_shape=self.model_shape.as_dict())
        harness.finish(self.folder, self.rank, result)


ACTIVE: StepHook | None = None
"""The hook of this process's trial, for `autotune.step.done()`."""


def run_command(argv: list[str], workdir: str) -> None:
    """The user's command as `python SCRIPT ARGS` or `python -m MODULE ARGS` would run it,
    from their folder."""
    os.chdir(workdir)
    if argv[0] == "-m":  # importable from the user's folder, as `python -m` there
        sys.path.insert(0, workdir)
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, str(Path(argv[0]).resolve().parent))
        runpy.run_path(argv[0], run_name="__main__")


def run_for_trial(
    argv: list[str], spec: TrialSpec, folder: Path, rank: int, steps: Callable[[], int | None]
) -> None:
    """Run the user's command as a rank of a trial; a failure is written down with its kind
    and raised again. `steps` says how many steps this rank saw (0: the script could not
    start; None: this rank cannot tell, e.g. one that prints no step lines). Returns when
    the command ends by itself."""
    try:
        seed_everything()
        if spec.parity.reseed is not None:
            reseed_after_first_step(spec.parity.reseed)
        run_command(argv, spec.user_job.workdir)
    except SystemExit as exc:
        if exc.code not in (0, None):
            seen = steps()
            when = "before its first step" if seen == 0 else f"after {seen or 'some'} step(s)"
            exited = RuntimeError(f"the script exited with code {exc.code} {when}")
            failures.write_error(folder, rank, exited, "script_error" if seen == 0 else "crash")
            raise
    except BaseException as exc:
        startup = steps() == 0 and isinstance(exc, STARTUP_FAILURES)
        failures.write_error(folder, rank, exc, "script_error" if startup else None)
        raise


def too_few_steps(steps: int, needed: int) -> failures.NoStepsError:
    return failures.NoStepsError(
        f"the script ended after {steps} optimizer step(s); a trial needs at least "
        f"{needed} (more while step times settle): let it run longer"
    )


def run_job(hook: StepHook) -> None:
    """Run the user's command (command.json) under `hook`. A command that returns has ended
    before the trial's steps were measured (the hook ends the process once they are)."""
    spec, folder, rank = hook.spec, hook.folder, hook.rank
    run_for_trial(read_command(folder), spec, folder, rank, lambda: hook.steps)
    plan = spec.steps  # the first step starts the clock; the profiled one comes after
    ended = too_few_steps(hook.steps, plan.min_warmup + plan.min_measured + 1 + plan.profile)
    failures.write_error(folder, rank, ended)
    raise ended
