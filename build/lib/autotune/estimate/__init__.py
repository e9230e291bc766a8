"""Predictions from the model alone: pure functions of specs and configs (no torch)."""

from autotune.estimate.model_states import ModelStates, model_states, rank_parameters

__all__ = ["ModelStates", "model_states", "rank_parameters"]
