"""One trial's contract: `spec.py` (what a trial is and the worker contract: trial.json in,
result.json out), `result.py` (what a trial reports), `length.py` (when a trial has measured
enough), `lifetime.py` (no process outlives its starter). Kept light: ranks import it. The
trial folder, its launch and its outcome are `autotune/runner.py`'s."""
