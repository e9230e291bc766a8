"""Reading a study: trial tables now; the HTML report and dashboard build on them."""

from autotune.report.table import trial_table

__all__ = ["trial_table"]
