"""Runs the user's own script as a trial when no framework hook covers it.

torchrun starts `python -m autotune.engines.script_job_worker trial.json` on every rank. The
trial's knobs go to the script in the JSON file that $AUTOTUNE_CONFIG names; the script calls
`autotune.step.done()` after each optimizer step, which tells the `job_hook.StepHook`.
"""

from __future__ import annotations

import os

from autotune.engines import job_hook, worker
from autotune.engines.user_job import KNOBS_FILE
from autotune.step import CONFIG_ENV


def main() -> None:
    hook = job_hook.StepHook(*worker.start())
    job_hook.ACTIVE = hook
    os.environ[CONFIG_ENV] = str(hook.folder / KNOBS_FILE)
    job_hook.run_job(hook, None)


if __name__ == "__main__":
    main()
