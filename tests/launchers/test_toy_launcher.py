"""A launcher registered from outside the package, with a setting of its own (its section of
the cluster file, its flag) and a launch file of its own: it runs a study and exports with no
file of autotune changed, and a cluster file that misspells its section is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from autotune.cli.options import checked_cluster, launcher_flags, launcher_options
from autotune.errors import InputError
from autotune.launchers import LAUNCHERS, LaunchSettings
from autotune.launchers.base import ExportContext, Launcher, LaunchOutcome, LaunchRequest
from autotune.launchers.settings import LauncherOption
from autotune.problem import load_problem
from autotune.specs import load_cluster
from autotune.study import Budget
from autotune.study.record.trial_attrs import COMMAND
from autotune.trial.spec import TRIAL_FILE, TrialSpec
from autotune.tune import TuneSettings, tune
from tests.fakes import Quiet, measured_outcome


@dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class QueueSettings:
    queue: str = "default"


class QueueLauncher(Launcher):
    """Submits each trial to a queue; its exported train.queue submits the winner there."""

    name = "queue"
    settings_type = QueueSettings
    options = (LauncherOption("--queue", "queue", "queue: where its jobs wait."),)

    def __init__(self, settings: QueueSettings) -> None:
        self.settings = settings

    @classmethod
    def build(cls, settings: LaunchSettings) -> QueueLauncher:
        return cls(settings.of(cls))

    @classmethod
    def export_files(cls, settings: Any, context: ExportContext) -> dict[str, str]:
        return {"train.queue": f"submit --queue={settings.queue} ./train.sh  # {context.name}\n"}

    def command(self, request: LaunchRequest) -> list[str]:
        return ["submit", f"--queue={self.settings.queue}", str(request.folder)]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        return measured_outcome(request, spec, 0.1 * (1 + spec.config.mbs % 3))


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LAUNCHERS, QueueLauncher.name, QueueLauncher)


def cluster_file(tmp_path: Path, section: str = "queue") -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "devices_per_node: 2\ndevice: cpu\nbackend: gloo\n"
        "intra_link: {bandwidth_gbps: 10, latency_us: 5}\n"
        f"{section}: {{queue: night}}\n"
    )
    return path


def test_a_registered_launcher_reads_its_section_and_flag_runs_a_study_and_exports_its_file(
    tmp_path: Path, registered: None
) -> None:
    problem = load_problem("torch", "tiny", str(cluster_file(tmp_path)))
    flags = {"queue": {"queue": "express"}}
    tuned = tune(
        problem,
        TuneSettings(
            budget=Budget(trials=3),
            launcher="queue",
            launch=LaunchSettings(flags=flags),
            results=tmp_path / "results",
        ),
        Quiet(),
    )
    commands = {t.user_attrs.get(COMMAND) for t in tuned.study.trials}
    assert commands and all(c and "--queue=express" in c for c in commands)  # the flag won
    exported = {p.name: p for p in tuned.exported}
    assert exported["train.queue"].read_text().startswith("submit --queue=night ./train.sh")
    assert "train.sbatch" not in exported  # not a SLURM cluster


def test_a_registered_launchers_flag_is_offered_and_read_by_setting(registered: None) -> None:
    @click.command()
    @launcher_options(lambda: ["local", "queue"])
    def command(**given: Any) -> None:
        click.echo(repr(launcher_flags(given, ["local", "queue"])))

    done = CliRunner().invoke(command, ["--queue", "weekend"])
    assert done.output.strip() == "{'queue': {'queue': 'weekend'}}"
    assert "queue: where its jobs wait." in CliRunner().invoke(command, ["--help"]).output


def test_a_misspelt_or_unreadable_section_is_refused_in_one_line(
    tmp_path: Path, registered: None
) -> None:
    checked_cluster(load_cluster(str(cluster_file(tmp_path))))
    with pytest.raises(InputError, match=r"unknown section 'queu'.*did you mean queue"):
        checked_cluster(load_cluster(str(cluster_file(tmp_path, "queu"))))
    bad = tmp_path / "bad.yaml"
    bad.write_text(cluster_file(tmp_path).read_text().replace("{queue: night}", "{queu: night}"))
    with pytest.raises(InputError, match=r"section queue: queu: no such setting; settings: queue"):
        checked_cluster(load_cluster(str(bad)))
