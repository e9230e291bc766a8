"""The study as Optuna stores it: storage and its schema, every trial attribute's name, who
holds a trial, the verdicts stored so far, and the only calls into Optuna's private API."""
