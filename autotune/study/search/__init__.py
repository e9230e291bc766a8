"""What to measure next: Optuna's samplers, the model-guided search, what the model gets
wrong, why each trial was chosen, and when another trial no longer pays."""
