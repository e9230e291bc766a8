"""One trial: `spec.py` (what a trial is and the worker contract: trial.json in, result.json
out), `folder.py` (the trial folder, its launch and its outcome), `lifetime.py` (no process
outlives its starter). Kept light: workers import `spec` and `lifetime` under torchrun."""
