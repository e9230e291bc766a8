"""For your own training loop: call `autotune.step.done()` after each optimizer step.

Under `autotune run --engine torch --space FILE -- your_script.py ...` this is how autotune
times your loop (warm-up, measured steps, the profiled step), and the trial's knobs are in the
JSON file that $AUTOTUNE_CONFIG names. Pass the step's loss (`done(loss=...)`) and autotune
also checks that each config trains the same model as yours. Anywhere else it does nothing,
so the call can stay in production code. Importing this module imports nothing else.
"""

from __future__ import annotations

import sys

CONFIG_ENV = "AUTOTUNE_CONFIG"
"""Names the JSON file of the trial's knobs (tp, pp, dp, zero, mbs, grad_accum, ...)."""


def done(loss: object = None) -> None:
    """One optimizer step of this rank has ended; `loss` (a number or a one-element tensor):
    its loss, averaged over its micro-batches, for autotune's check that a tuned config
    trains the same model as yours (loss parity)."""
    hook_module = sys.modules.get("autotune.rank.job_hook")
    hook = getattr(hook_module, "ACTIVE", None)
    if hook is not None:
        hook.step_done(loss)
