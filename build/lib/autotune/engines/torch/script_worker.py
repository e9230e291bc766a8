"""A rank of a trial of a script tuned through the `autotune.step` helper.

`autotune.rank` runs it on every rank. The trial's knobs go to the script in the JSON file
that $AUTOTUNE_CONFIG names; the script calls `autotune.step.done()` after each optimizer
step, which tells the `job_hook.StepHook`.
"""

from __future__ import annotations

import os

from autotune.engines.torch.jobs import KNOBS_FILE
from autotune.rank import harness, job_hook
from autotune.step import CONFIG_ENV


def main(args: list[str], started: float) -> None:
    hook = job_hook.StepHook(*harness.start(args, started))
    job_hook.ACTIVE = hook
    os.environ[CONFIG_ENV] = str(hook.folder / KNOBS_FILE)
    job_hook.run_job(hook)
