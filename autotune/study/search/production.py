"""The production run a study tunes for (`--production 14d`, `250000 steps`): what its
economic stop rule and account weigh tuning against (`economics`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from pydantic import TypeAdapter, ValidationError

from autotune.errors import InputError

PRODUCTION = "production"
"""On the study: the production run it tunes for (`Production.as_attr`)."""
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)\s*([kmb]?)\s*steps?", re.IGNORECASE)
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}


@dataclass(frozen=True)
class Production:
    """The production run the tuned config will train: a duration, or a number of steps
    (timed at the best config's step time)."""

    text: str
    hours: float | None = None
    steps: int | None = None

    def hours_at(self, step_time_s: float | None) -> float | None:
        """Its length in hours, steps timed at `step_time_s`."""
        if self.hours is not None:
            return self.hours
        return self.steps * step_time_s / 3600 if self.steps and step_time_s else None

    def as_attr(self) -> dict[str, Any]:
        return {"text": self.text, "hours": self.hours, "steps": self.steps}

    @classmethod
    def of(cls, study: optuna.Study) -> Production | None:
        """The study's, read back checked as input is; None where it tunes for none."""
        stored = study.user_attrs.get(PRODUCTION)
        if stored is None:
            return None
        try:
            return TypeAdapter(cls).validate_python(stored)
        except ValidationError:
            raise InputError(
                f"study {study.study_name!r}: its stored production run {stored!r} is not "
                "one; it was edited or damaged: run again with --production"
            ) from None


def parse_production(text: str, seconds_of: Callable[[str, str], float | None]) -> Production:
    """`14d`, `36h`, `1d12h` (through `seconds_of`, the CLI's duration parser) or
    `250000 steps`, `250k steps`; an InputError names what is wrong."""
    cleaned = text.strip()
    if (found := _AMOUNT.fullmatch(cleaned)) is not None:
        steps = float(found.group(1)) * _SCALE[found.group(2).lower()]
        if steps < 1 or steps != int(steps):
            raise InputError(f"--production: a whole number of steps, not {text!r}")
        return Production(text=cleaned, steps=int(steps))
    if "step" in cleaned.lower():
        raise InputError(
            f"--production: expected steps like 250000 steps or 250k steps, not {text!r}"
        )
    seconds = seconds_of(cleaned, "--production")
    assert seconds is not None
    return Production(text=cleaned, hours=seconds / 3600)
