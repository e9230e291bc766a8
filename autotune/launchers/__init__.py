"""Launchers start a trial's processes, enforce its time limit and classify the outcome.

A launcher is registered here, by its `name`; `autotune run --launcher NAME` and the
contract tests (tests/contract/test_launcher_contract.py) find it in `LAUNCHERS`. A launcher
with settings of its own reads them from the cluster file's section of its name and its flags,
which every command that may run it offers, and may export files of its own."""

from collections.abc import Iterable

from autotune.errors import InputError, did_you_mean
from autotune.launchers.base import (
    ExportContext,
    Launcher,
    LaunchOutcome,
    LaunchRequest,
    LaunchSettings,
)
from autotune.launchers.local import LocalLauncher
from autotune.launchers.replay import ReplayLauncher
from autotune.launchers.settings import LauncherOption, check_section
from autotune.launchers.simulate import SimulateLauncher
from autotune.launchers.slurm import SlurmLauncher
from autotune.specs.cluster import Cluster
from autotune.specs.loading import ClusterFile

LAUNCHERS: dict[str, type[Launcher]] = {
    c.name: c for c in (LocalLauncher, SlurmLauncher, SimulateLauncher, ReplayLauncher)
}


def get_launcher(name: str, settings: LaunchSettings | None = None) -> Launcher:
    if name not in LAUNCHERS:
        hint = did_you_mean(name, LAUNCHERS)
        raise InputError(f"unknown launcher {name!r}; launchers: {', '.join(LAUNCHERS)}{hint}")
    return LAUNCHERS[name].build(settings or LaunchSettings())


def check_sections(cluster: Cluster) -> None:
    """Raise InputError, before any trial, for a section of the cluster file that no launcher
    reads or that its launcher cannot read (a typo is not left to the export)."""
    for section, values in cluster.launcher_sections.items():
        launcher = LAUNCHERS.get(str(section))
        if launcher is None or launcher.settings_type is None:
            readers = [name for name, c in LAUNCHERS.items() if c.settings_type is not None]
            hint = did_you_mean(str(section), [*readers, *ClusterFile.model_fields])
            raise InputError(
                f"cluster {cluster.name}: unknown section {section!r}; the launchers' "
                f"sections: {', '.join(readers)}{hint}"
            )
        check_section(launcher.settings_type, launcher.name, values)


def check_settings(settings: LaunchSettings) -> None:
    """Raise InputError, before any trial, for a cluster-file section or a flag given that its
    launcher cannot read: every launcher's, not only the one that runs (a `--partition` with
    a line break is refused even where the run is simulated)."""
    if settings.cluster is not None:
        check_sections(settings.cluster)
    for name, given in settings.flags.items():
        launcher = LAUNCHERS.get(name)
        if launcher is None:
            raise InputError(
                f"flags of an unknown launcher {name!r}{did_you_mean(name, LAUNCHERS)}"
            )
        if launcher.settings_type is not None and any(v not in (None, ()) for v in given.values()):
            settings.of(launcher)


def exported_files(used: Iterable[str], context: ExportContext) -> dict[str, str]:
    """Launchers' own files for best/: of each launcher that ran the study's trials (`used`)
    or has a section in its cluster file."""
    cluster = context.spec.cluster
    settings = LaunchSettings(cluster=cluster)
    files: dict[str, str] = {}
    for name, launcher in LAUNCHERS.items():
        if name in used or name in cluster.launcher_sections:
            own = settings.of(launcher) if launcher.settings_type is not None else None
            files.update(launcher.export_files(own, context))
    return files


def options_of(names: Iterable[str]) -> dict[str, tuple[LauncherOption, ...]]:
    """The flags of these launchers, by launcher: those that have some."""
    return {n: LAUNCHERS[n].options for n in names if LAUNCHERS[n].options}


__all__ = [
    "LAUNCHERS",
    "ExportContext",
    "LauncherOption",
    "check_sections",
    "check_settings",
    "exported_files",
    "options_of",
    "LaunchOutcome",
    "LaunchRequest",
    "LaunchSettings",
    "Launcher",
    "get_launcher",
]
