"""Where the slurm launcher's jobs go: the cluster file's `slurm:` section and its flags."""

from __future__ import annotations

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from autotune.launchers.settings import LauncherOption
from autotune.specs.loading import Text


@dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class SlurmSettings:
    """Where submitted trials go, and the exported train.sbatch with them."""

    partition: Text | None = None
    account: Text | None = None
    qos: Text | None = None
    extra_sbatch: tuple[Text, ...] = ()
    """Further sbatch options, e.g. `--constraint=h100` or `--exclusive`."""
    exclude: tuple[Text, ...] = ()
    """Nodes trials never run on: those the node check found slow (`autotune.nodes`)."""

    def options(self) -> list[str]:
        named = {"partition": self.partition, "account": self.account, "qos": self.qos}
        chosen = [f"--{k}={v}" for k, v in named.items() if v]
        return chosen + list(self.extra_sbatch) + self.exclusion()

    def exclusion(self) -> list[str]:
        return [f"--exclude={','.join(self.exclude)}"] if self.exclude else []


SLURM_OPTIONS = (
    LauncherOption("--partition", "partition", "slurm: partition of the jobs."),
    LauncherOption("--account", "account", "slurm: account charged for the jobs."),
    LauncherOption("--qos", "qos", "slurm: quality of service of the jobs."),
    LauncherOption(
        "--sbatch-option",
        "extra_sbatch",
        "slurm: a further sbatch option for every job, e.g. --sbatch-option=--exclusive.",
        multiple=True,
    ),
)
