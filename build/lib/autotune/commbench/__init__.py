"""`autotune commbench`: `bench.py` plans and launches the benchmark through a trial launcher
and reads its report; `worker.py` runs on every rank under torchrun. Kept apart so the
worker imports none of the tuner."""
