"""The launcher contract and the outcome rules every launcher shares."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from autotune.launchers.exits import RankExit, root_cause
from autotune.launchers.log_limit import read_bounded
from autotune.launchers.settings import LauncherOption, read_settings
from autotune.specs.cluster import Cluster
from autotune.trial.result import TrialResult
from autotune.trial.spec import RESULT_FILE, TRIAL_FILE, Outcome, PoolKind, TrialSpec, read_json

if TYPE_CHECKING:
    from autotune.estimate.calibration import Calibration
    from autotune.estimate.traits import EngineTraits
    from autotune.problem import Problem

LOG_FILE = "log.txt"


@dataclass(frozen=True, kw_only=True)
class LaunchSettings:
    """What launchers are built from, each taking the part it needs: the simulate launcher
    its model's calibration and the engine's traits, the slurm launcher whether its jobs take
    GPUs; each launcher with settings of its own (`Launcher.settings_type`) its section of the
    cluster file and its flags."""

    calibration: Calibration | None = None
    traits: EngineTraits | None = None
    gpus: bool = False
    cluster: Cluster | None = None
    """The cluster, whose file's sections hold each launcher's settings."""
    flags: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each launcher's flags as given (launcher -> settings field -> value; None: not given)."""

    def of(self, launcher: type[Launcher]) -> Any:
        """`launcher`'s own settings: its section of the cluster file, then its flags."""
        assert launcher.settings_type is not None
        sections = self.cluster.launcher_sections if self.cluster else {}
        return read_settings(
            launcher.settings_type,
            launcher.name,
            sections.get(launcher.name),
            self.flags.get(launcher.name, {}),
            launcher.options,
        )


@dataclass(frozen=True, kw_only=True)
class ExportContext:
    """What a launcher's exported files say of the config they run (`Launcher.export_files`)."""

    spec: TrialSpec
    study_name: str
    name: str
    """The config as the study's verdict names it ("trial 0; figures from trials 24-25")."""
    banner: tuple[str, ...] = ()
    """Comment lines that open every exported file (a simulated study says so)."""


@dataclass(frozen=True, kw_only=True)
class LaunchRequest:
    folder: Path
    """Trial folder: the worker reads trial.json here and writes its files here."""
    worker_module: str
    nprocs_per_node: int
    nnodes: int = 1
    env: dict[str, str] = field(default_factory=dict, hash=False)
    time_limit_s: float = 600.0
    worker_file: str = TRIAL_FILE
    """What the worker module reads, in `folder` (commbench's plan for its worker)."""
    pool: PoolKind | None = None
    """The pool the worker may run in, where the launcher keeps one; None: a launch of its
    own."""


@dataclass(frozen=True, kw_only=True)
class LaunchOutcome:
    kind: Outcome
    error: str | None
    wall_s: float
    result: TrialResult | None = None
    returncode: int | None = None
    queue_s: float = 0.0
    """Waiting for resources (a scheduler's queue), apart from `wall_s`."""


class Launcher(ABC):
    """Starts one trial and waits for it; kills only what it started."""

    name: ClassVar[str]
    source: ClassVar[str] = "measured"
    """How its results are labelled everywhere: measured, or simulated."""
    settings_type: ClassVar[type[Any] | None] = None
    """Its own settings, a frozen (pydantic) dataclass: read from the cluster file's section
    named after the launcher and from its `options` (`LaunchSettings.of`)."""
    options: ClassVar[tuple[LauncherOption, ...]] = ()
    """Its flags, on every command that may run it (`--partition` for slurm)."""

    @classmethod
    def build(cls, settings: LaunchSettings) -> Launcher:
        """This launcher for the run's settings (most need none of them)."""
        return cls()

    @classmethod
    def export_files(cls, settings: Any, context: ExportContext) -> dict[str, str]:
        """Files of its own in best/ (name -> text), for a study that ran trials through it or
        whose cluster file has its section (`settings` read from that section): SLURM's
        train.sbatch. Most have none."""
        return {}

    def trials_from(self) -> str:
        """What its trials are, for a study to refuse mixing them with others' (`source`;
        a replay, its table's path)."""
        return self.source

    def narrow(self, problem: Problem) -> Problem:
        """The problem restricted to what this launcher can run (a replay, its table's rows)."""
        return problem

    @abstractmethod
    def command(self, request: LaunchRequest) -> list[str]:
        """The exact command that runs the trial, as a person would re-run it."""

    def check(self, cluster: Cluster) -> None:
        """Raise InputError, before any trial, for what this launcher cannot run there."""
        return None

    @abstractmethod
    def run(self, request: LaunchRequest) -> LaunchOutcome:
        """Run to completion, timeout or Ctrl-C (which it re-raises after cleaning up)."""

    def ran_on(self, request: LaunchRequest) -> str | None:
        """The nodes the finished trial ran on, as the launcher knows them (a host name,
        SLURM's node list); None where it ran on none (a simulated trial)."""
        return None

    def close(self) -> None:
        """Stop what the launcher keeps between trials (a pool); the study's end."""
        return None

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


_ROOT_CAUSE_ORDER = {"oom": 0, "crash": 1, "comm_error": 2}


MTIME_SLACK_S = 2.0
"""How much older than the launch a file may look and still be the launch's own: file systems
that keep coarse times (2 s on some), and a shared one whose clock runs a little behind."""


def classify(
    folder: Path,
    returncode: int | None,
    timed_out: bool,
    wall_s: float,
    since: float | None = None,
) -> LaunchOutcome:
    """The outcome from the worker's files first, the launcher's knowledge second.

    Only what this launch wrote counts: with `since` (the launch's start, time.time()), a
    result.json or error-rank*.json older than it is a previous launch's and ignored (the
    runner also sets a previous launch's folder aside before it runs). A rank's error file
    comes before any result: a trial one of whose ranks failed did not succeed (but for a rank
    that failed after the result was written, in the framework's teardown, once the trial was
    measured: Megatron-LM's and torchtitan's logging rank writes it as soon as it has its
    steps). When one rank
    fails the others usually see a communication error, so the root cause is the
    out-of-memory or crash of some rank, before any communication error.
    """
    errors = [
        e
        for p in sorted(folder.glob("error-rank*.json"))
        if _written_since(p, since) and (e := read_json(p)) and _before_result(e, folder, since)
    ]
    if errors:
        worst = min(
            errors, key=lambda e: (_ROOT_CAUSE_ORDER.get(e.get("kind", ""), 1), e.get("time", 0))
        )
        return LaunchOutcome(
            kind=worst.get("kind", "crash"),
            error=worst.get("error"),
            wall_s=wall_s,
            returncode=returncode,
        )
    result = TrialResult.read(folder) if _written_since(folder / RESULT_FILE, since) else None
    if result is not None:
        return LaunchOutcome(
            kind="ok", error=None, wall_s=wall_s, result=result, returncode=returncode
        )
    if timed_out:
        return LaunchOutcome(
            kind="timeout",
            error=f"killed at the time limit after {wall_s:.0f} s",
            wall_s=wall_s,
            returncode=returncode,
        )
    if returncode == 0:  # a user's command that ended on its own (e.g. os._exit) too early
        return LaunchOutcome(
            kind="no_steps",
            error="the command ended normally before the trial's steps were measured",
            wall_s=wall_s,
            returncode=returncode,
        )
    return _unreported(folder, returncode, wall_s)


def _unreported(folder: Path, returncode: int | None, wall_s: float) -> LaunchOutcome:
    """A launch that failed with no rank's error and no result: a rank's own exit or a
    signal, where torchrun (or a pool's rank) tells it; else the worker never got going (a
    bad environment, an import failure), its log's first error line."""
    log = read_bounded(folder / LOG_FILE)
    ended = root_cause(log) or (RankExit(returncode) if returncode and returncode < 0 else None)
    if ended is not None and (ended.code < 0 or "Traceback" not in log):
        kind, error = ended.named()
        return LaunchOutcome(kind=kind, error=error, wall_s=wall_s, returncode=returncode)
    line = first_error_line(log) or f"exited with code {returncode} and wrote no result"
    return LaunchOutcome(kind="launch_error", error=line, wall_s=wall_s, returncode=returncode)


def _before_result(error: dict[str, object], folder: Path, since: float | None) -> bool:
    """Whether a rank's error came before this launch's result, if there is one."""
    result = folder / RESULT_FILE
    if not _written_since(result, since):
        return True
    written = error.get("time")
    return not isinstance(written, int | float) or written <= result.stat().st_mtime


def _written_since(path: Path, since: float | None) -> bool:
    """Whether `path` exists and is not older than the launch (always, without a start)."""
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return False
    return since is None or mtime >= since - MTIME_SLACK_S


_ERROR_LINE = re.compile(r"^\s*([\w.]*(Error|Exception|Interrupt)|error|ERROR)\b:?")
_WRAPPERS = ("ChildFailedError", "torch.distributed.elastic")


def first_error_line(log: str) -> str | None:
    """The first line that names an error, skipping torchrun's own wrappers."""
    for line in log.splitlines():
        if _ERROR_LINE.match(line) and not any(w in line for w in _WRAPPERS):
            return line.strip()[:300]
    tail = [line.strip() for line in log.splitlines() if line.strip()]
    return tail[-1][:300] if tail else None
