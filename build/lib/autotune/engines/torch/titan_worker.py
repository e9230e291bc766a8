"""A rank of a trial of the user's torchtitan command: it runs the command and reads
torchtitan's own metrics lines (`torchtitan.parse_line`)."""

from __future__ import annotations

from autotune.engines.torch.torchtitan import parse_line, reporting_rank
from autotune.rank import log_job

LOG = log_job.LogFormat("torchtitan", parse_line, reporting_rank)


def main(args: list[str], started: float) -> None:
    log_job.main(LOG, args, started)
