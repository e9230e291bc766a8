"""A rank of a trial of the user's Megatron-LM command: it runs the command and reads
Megatron-LM's own log lines (`jobs.parse_line`)."""

from __future__ import annotations

from autotune.engines.megatron.jobs import parse_line, reporting_rank
from autotune.rank import log_job

LOG = log_job.LogFormat("Megatron-LM", parse_line, reporting_rank)


def main(args: list[str], started: float) -> None:
    log_job.main(LOG, args, started)
