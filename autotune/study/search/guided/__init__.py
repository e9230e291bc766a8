"""The model-guided search (`GuidedSearch`, refitted after each trial) and the same search as
an Optuna sampler for a study of the user's own (`GuidedSampler`)."""

from autotune.study.search.guided.sampler import GuidedSampler

__all__ = ["GuidedSampler"]
