"""The best config of a study as launch files that production training uses unchanged."""

from autotune.export.best import export_best

__all__ = ["export_best"]
