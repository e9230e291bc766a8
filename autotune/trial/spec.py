"""What a worker is told to run (`trial.json`) and what it reports back (`result.json`).

The trial-to-tuner contract is these files, not exit codes or log greps.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import TypeAdapter

from autotune.space import TrainConfig
from autotune.specs import Cluster, Workload

Outcome = Literal[
    "ok",
    "oom",
    "timeout",
    "comm_error",
    "launch_error",
    "crash",
    "cancelled",
    "node_fail",
    "preempted",
    "script_error",
    "no_steps",
    "config_ignored",
    "slow_node",
]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
"""`cancelled`, `node_fail` and `preempted` come from a scheduler: cancelled outside
autotune, a node failed, preempted (each retried once where that can help). The last three
are a user's script's: it could not start whatever the config (a syntax error, a missing
module or file, an argument it refuses), it ended before the trial's steps were measured, or
it ran with settings other than the config file it was given. `slow_node`: the trial ran,
but one of its nodes computed well slower than its peers (`nodes.judge.slow_in_trial`), so
its speed is the node's, not the config's; the config may run again on other nodes."""

NCCL_TUNED = ("NCCL_ALGO", "NCCL_PROTO")
"""NCCL variables a trial sets from its config, and no one else: launchers drop inherited ones."""
FAULT_ENV = "AUTOTUNE_INJECT_FAULT"
"""Test hook: `hang`, `crash` or `oom` makes rank 0 misbehave at its first step; `nccl_env`
gives rank 1 an NCCL setting of its own."""
TRIAL_ENV = "AUTOTUNE_TRIAL"
"""Set by the runner: the trial every process of its launch belongs to (its folder), which
every process the user's command starts inherits; what is still running with it once the
trial has ended is stopped (`launchers.process_tree.sweep`)."""
LAUNCH_EPOCH_ENV = "AUTOTUNE_LAUNCH_EPOCH"
"""Set by launchers: wall-clock time the launch began, to split trial overhead into phases."""

TRIAL_FILE = "trial.json"
RESULT_FILE = "result.json"
METRICS_FILE = "metrics.jsonl"
COMMAND_FILE = "command.json"
"""The user's command as a trial runs it (its argument list), written by the tuner beside
trial.json from the job's framework: a rank reads it here, so no rank needs a framework's
code."""


@dataclass(frozen=True, kw_only=True)
class StepPlan:
    """How long a trial runs: warm-up until step time settles (capped in steps and in
    seconds), then measured steps until the step time is known well enough for the decision
    the trial feeds (see `trial.length`), at most `measured_steps`.

    Longer trials cost time but shrink the spread; see README, "Trial length and noise".
    """

    min_warmup: int = 2
    max_warmup: int = 12
    max_warmup_s: float = 15.0
    """Warm-up also ends, settled or not, once it has lasted this long: a few steps when
    steps are long, up to `max_warmup` when they are short."""
    settle_window: int = 2
    settle_tolerance: float = 0.10
    """Warm-up ends when step time stops falling: the last step is no more than this fraction
    faster than the median of the `settle_window - 1` steps before it."""
    min_measured: int = 3
    measured_steps: int = 8
    """The most measured steps; fewer once `precision` is reached or the trial cannot win."""
    precision: float = 0.02
    """Stop measuring once the 95% interval of the step time is within this share of it;
    0 measures every one of `measured_steps`."""
    best_s: float | None = None
    """The study's best step time so far: a trial far from it needs a looser interval to be
    ranked against it. None: the first trial, a repeat of the best, the winner's repeats
    after its choice, and every trial of a slice study."""
    margin: float | None = None
    """A trial surely slower than `best_s` by this share stops (it cannot win); None: never."""
    profile: bool = True
    """Profile one extra step with torch.profiler to split communication from computation,
    in a trial that could be the winner: the first, or one within `precision` of the best."""


@dataclass(frozen=True, kw_only=True)
class ParityPlan:
    """What a trial of a user's command does for loss parity (`study/verdict/parity.py`)."""

    reseed: int | None = None
    """Seed torch's generators with this once the first optimizer step has ended: a run of the
    user's config whose dropout (and any other draw after that step) comes out otherwise, so
    that its distance from the first run measures what a safe change does to the loss."""
    reference: tuple[float, ...] = ()
    """The user's config's loss at each step, from the first..."""
    floor: tuple[float, ...] = ()
    """...and the largest relative difference from it that is still the same training, per
    step: a trial whose loss leaves it stops once its speed is measured (`over`)."""
    least: float = 0.0
    """The least loss a difference is relative to (`relative_difference`)."""

    def over(self, step: int, loss: float) -> bool:
        """Whether the loss of step `step` (from 1) is over the floor (never past the
        reference's steps)."""
        if step > min(len(self.reference), len(self.floor)):
            return False
        base = self.reference[step - 1]
        return relative_difference(loss, base, self.least) > self.floor[step - 1]


def relative_difference(loss: float, base: float, least: float = 0.0) -> float:
    """|loss - base| / |base|, relative to no less than `least` (a loss near 0, a batch the
    model has learnt by heart, would make any difference huge); infinite where one loss is not
    finite and the other is not the same (a NaN or inf loss never passes for the same
    training)."""
    if math.isfinite(loss) and math.isfinite(base):
        return abs(loss - base) / max(abs(base), least, 1e-12)
    same = (math.isnan(loss) and math.isnan(base)) or loss == base
    return 0.0 if same else math.inf


PoolKind = Literal["warm", "forked"]
"""How a launcher may keep a world's ranks between trials: `warm`, ranks that run trial after
trial in one process (a built-in engine's `SESSION`, built afresh each time); `forked`, ranks
that have imported the worker and fork a fresh process for each trial (a user's command), so
the imports are paid once and nothing else carries over."""


@dataclass(frozen=True, kw_only=True)
class UserJob:
    """The user's own training command, run once per rank by the trial launcher with the
    trial's config in place of theirs."""

    command: tuple[str, ...]
    """The script (or `-m module`) and its arguments, as given after `--`."""
    framework: str
    """The framework that runs it (`engines.FRAMEWORKS`): how it takes a trial's config
    and how its steps are seen."""
    workdir: str
    """Where it was given: the command runs here, so its relative paths mean the same."""
    config_index: int | None = None
    """Index in `command` of the argument that holds the config file's path; None for a
    script that reads the trial's knobs from $AUTOTUNE_CONFIG."""
    base_config: dict[str, Any] = field(default_factory=dict, hash=False)
    """The user's config file as it was when the study began."""

    @property
    def name(self) -> str:
        """A short name for study names: the script's or module's stem."""
        if self.command[0] == "-m":
            return self.command[1].rsplit(".", 1)[-1]
        return Path(self.command[0]).stem

    def argv_with_config(self, config_path: str) -> list[str]:
        """The command with its config file replaced by `config_path`."""
        argv = list(self.command)
        if self.config_index is None:
            return argv
        argument = argv[self.config_index]
        if argument.startswith("--"):  # --flag=FILE
            config_path = f"{argument.partition('=')[0]}={config_path}"
        argv[self.config_index] = config_path
        return argv


@dataclass(frozen=True, kw_only=True)
class TrialSpec:
    engine: str
    workload: Workload
    cluster: Cluster
    config: TrainConfig
    steps: StepPlan = field(default_factory=StepPlan)
    job: UserJob | None = None
    """The user's command, when the trial runs it instead of autotune's own worker."""
    parity: ParityPlan = field(default_factory=ParityPlan)

    @property
    def user_job(self) -> UserJob:
        """The user's command this trial runs; ValueError for a trial of autotune's own
        worker."""
        if self.job is None:
            raise ValueError("a trial of autotune's own worker runs no user's command")
        return self.job

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TrialSpec:
        return _adapter().validate_json(text)


@functools.cache
def _adapter() -> TypeAdapter[TrialSpec]:
    """Built once: building it walks every nested dataclass (tens of ms)."""
    return TypeAdapter(TrialSpec)


def nccl_environment(spec: TrialSpec) -> dict[str, str]:
    """NCCL_ALGO / NCCL_PROTO for the config's choices; nothing for NCCL's default."""
    chosen = dict(zip(NCCL_TUNED, (spec.config.nccl_algo, spec.config.nccl_proto), strict=True))
    return {name: value for name, value in chosen.items() if value != "default"}


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file, flushed to disk, and rename, so a reader never sees half a
    file, even after a crash of the machine; the folder is synced after (best effort: not
    every file system can). A write or rename that fails removes the temporary file and
    raises."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):  # the failure that brought us here is reported
            tmp.unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from a file the worker wrote, or None when absent or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_command(folder: Path) -> list[str]:
    """The command a trial's rank runs, as the tuner wrote it (`COMMAND_FILE`)."""
    argv = json.loads((folder / COMMAND_FILE).read_text())
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise ValueError(f"{folder / COMMAND_FILE}: not a command")
    return argv
