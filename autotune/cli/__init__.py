"""The `autotune` command line: a package of commands over `tune` and the library.

`app` holds the group and `main`; importing the command modules registers their commands."""

from autotune.cli import commbench_command, dashboard_command, nodes_command, planning, tuning
from autotune.cli.app import cli, main

__all__ = [
    "cli",
    "commbench_command",
    "dashboard_command",
    "main",
    "nodes_command",
    "planning",
    "tuning",
]
