"""What autotune reads from a framework's own log lines (Megatron-LM, torchtitan). Pure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoggedStep:
    """One optimizer step's wall time, as the framework timed and printed it, and its loss
    where the line tells it (averaged over micro-batches and ranks by the framework)."""

    seconds: float
    loss: float | None = None


@dataclass(frozen=True)
class LoggedMemory:
    """A peak-memory figure the framework printed for this rank."""

    peak_bytes: int
    kind: str
    """What was read, e.g. megatron_max_allocated: named in the trial's result."""


Logged = tuple[LoggedStep | LoggedMemory, ...]
"""What one line says: nothing, a step, a memory figure, or both."""

ANSI_COLOUR = r"\x1b\[[0-9;]*m"
