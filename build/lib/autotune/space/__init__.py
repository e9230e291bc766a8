"""What can be tried: `TrainConfig`, the validity rules, search-space files and enumeration."""

from autotune.space.config import KNOBS, TrainConfig, config_key, nccl_default, parse_overrides
from autotune.space.enumerate import Enumeration, enumerate_space
from autotune.space.rules import GENERIC_RULES, Rule, first_violation
from autotune.space.spacefile import SearchSpace, load_space

__all__ = [
    "GENERIC_RULES",
    "KNOBS",
    "Enumeration",
    "Rule",
    "SearchSpace",
    "TrainConfig",
    "config_key",
    "enumerate_space",
    "first_violation",
    "load_space",
    "nccl_default",
    "parse_overrides",
]
