"""Options the commands share, the console they print to, and option parsing."""

from __future__ import annotations

import math
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from autotune.cli.help import completing, lowered
from autotune.errors import InputError
from autotune.launchers import LAUNCHERS, check_sections, options_of
from autotune.problem import Problem
from autotune.specs.cluster import Cluster
from autotune.trial.spec import StepPlan

F = TypeVar("F", bound=Callable[..., Any])

# Tables stay readable when output goes to a file or pipe (80 columns otherwise).
console = Console(soft_wrap=True, width=shutil.get_terminal_size((140, 40)).columns)


def _folder_or_none(ctx: click.Context, param: click.Parameter, value: Path) -> Path:
    """--results names a folder, existing or to be made; a file there is refused at once."""
    if value.exists() and not value.is_dir():
        raise click.BadParameter(f"{value} is a file, not a folder")
    return value


def _not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An empty --model, --cluster or --space is a slip (an unset shell variable), not a
    request for the default."""
    if value is not None and not value.strip():
        raise click.BadParameter("empty; give a preset name or a file")
    return value


results_option = click.option(
    "--results",
    type=click.Path(path_type=Path),
    callback=_folder_or_none,
    default=Path("results"),
    show_default=True,
    help="Results root: studies, trial folders, saved calibrations.",
)


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange, refusing NaN and infinity (which pass its bounds)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def engine_names() -> list[str]:
    from autotune.engines import ENGINES

    return list(ENGINES)


def launcher_names() -> list[str]:
    return list(LAUNCHERS)


def measuring_launcher_names() -> list[str]:
    """The registered launchers that measure on real processes (not simulate or replay)."""
    return [name for name, launcher in LAUNCHERS.items() if launcher.source == "measured"]


def sampler_names() -> list[str]:
    from autotune.study.search.samplers import STRATEGIES

    return list(STRATEGIES)


def problem_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--engine, --model, --cluster and --space, shared by every command that plans or runs."""
    options = [
        click.option(
            "--engine",
            default="deepspeed",
            show_default=True,
            callback=lowered,
            shell_complete=completing(engine_names),
            help="Training engine: deepspeed, torch or megatron.",
        ),
        click.option(
            "--model",
            default="tiny",
            show_default=True,
            help="Workload preset (tiny, gpt-1.3b, llama3-8b, ...) or YAML file.",
            callback=_not_empty,
        ),
        click.option(
            "--cluster",
            default="local",
            show_default=True,
            help="Cluster preset (local, local:N, local:NxM, dgx-h100:16, ...) or YAML file.",
            callback=_not_empty,
        ),
        click.option(
            "--space",
            default=None,
            callback=_not_empty,
            help="Search-space file [default: the engine's].",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def length_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--measured-steps and --precision: how long a trial measures (`trial.length`)."""
    options = [
        click.option(
            "--measured-steps",
            default=None,
            type=click.IntRange(min=2),
            help="At most this many measured steps per trial after warm-up; fewer once "
            "--precision is reached or the trial is surely slower than the best [default: 8].",
        ),
        click.option(
            "--precision",
            default=StepPlan.precision,
            show_default=True,
            type=FiniteFloatRange(0),
            help="Stop measuring once the 95% interval of the step time is within this "
            "share of it, or of the between-trial spread where wider (autotune run); 0 "
            "measures every one of --measured-steps.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def step_plan(measured_steps: int | None, precision: float) -> StepPlan:
    if measured_steps is None:
        return StepPlan(precision=precision)
    return StepPlan(measured_steps=measured_steps, precision=precision)


def launcher_options(names: Callable[[], Iterable[str]]) -> Callable[[F], F]:
    """The flags of these launchers (each launcher's `options`: --partition for slurm)."""

    def decorate(func: F) -> F:
        for launcher, options in reversed(options_of(names()).items()):
            for option in reversed(options):
                func = click.option(
                    option.flag,
                    option.param(launcher),
                    type=click.Path(path_type=Path, dir_okay=False) if option.file else None,
                    multiple=option.multiple,
                    default=None,
                    help=option.help,
                )(func)
        return func

    return decorate


def launcher_flags(given: dict[str, Any], names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each launcher's flags, taken out of a command's parameters, by settings field."""
    return {
        launcher: {o.field: given.pop(o.param(launcher)) for o in options}
        for launcher, options in options_of(names).items()
    }


def checked_cluster(cluster: Cluster) -> Cluster:
    """The cluster, once its file's launcher sections are found readable (before any run)."""
    check_sections(cluster)
    return cluster


def checked_problem(problem: Problem) -> Problem:
    """The problem, once its cluster file's launcher sections are found readable."""
    check_sections(problem.cluster)
    return problem


def launcher_groups(names: Iterable[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The launchers' flags as `--help` groups them: one group a launcher."""
    return tuple(
        (f"The {launcher} launcher", tuple(o.param(launcher) for o in options))
        for launcher, options in options_of(names).items()
    )


storage_option = click.option(
    "--storage",
    default=None,
    help="Optuna storage URL [default: sqlite:///results/<study>/study.db].",
)


def study_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--study, --storage and --results for the commands that read a study."""
    options = [
        click.option("--study", "study_name", required=True, help="Study name."),
        storage_option,
        results_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | None, flag: str) -> float | None:
    """`90`, `90s`, `30m`, `1h30m` -> seconds; must be positive."""
    if text is None:
        return None
    cleaned = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        seconds = float(cleaned)
    elif re.fullmatch(f"(?:{_DURATION.pattern})+", cleaned):
        seconds = sum(float(n) * _SECONDS[u] for n, u in _DURATION.findall(cleaned))
    else:
        raise InputError(f"{flag}: expected a duration like 90s, 30m or 1h30m, not {text!r}")
    if seconds <= 0:
        raise InputError(f"{flag}: the duration must be positive, not {text!r}")
    return seconds


def check_writable_folder(path: Path, flag: str) -> None:
    """Refuse, before anything runs, a folder autotune would write that cannot be made: a
    file in its place or above it, a read-only folder, /proc. It creates nothing that stays:
    a probe folder in the nearest existing parent is made and removed at once."""
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        what = "is" if parent == path else f"is under {parent}, which is"
        raise InputError(f"{flag} {path} {what} a file, not a folder")
    try:
        with tempfile.TemporaryDirectory(dir=parent, prefix=".autotune-probe-"):
            pass
    except OSError as exc:
        raise InputError(
            f"{flag} {path}: cannot write in {parent}: {exc.strerror or exc}"
        ) from None
