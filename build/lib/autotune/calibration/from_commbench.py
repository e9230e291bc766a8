"""`autotune calibrate --commbench`: fit collective times to a commbench report and save them
into the cluster's calibration, keeping its other fitted parameters."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from autotune.calibration.saved import calibration_path, save_collectives
from autotune.errors import InputError
from autotune.estimate.commfit import CollectiveFit, fit_commbench, require_fits
from autotune.specs import load_cluster


@dataclass(frozen=True)
class CommCalibrationReport:
    fits: tuple[CollectiveFit, ...]
    cluster: str
    saved_to: Path


def calibrate_commbench(
    report_path: Path, cluster_name: str | None, results: Path
) -> CommCalibrationReport:
    """`cluster_name` None: the cluster the report names."""
    try:
        report = json.loads(report_path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"--commbench: cannot read {report_path}: {exc}") from None
    if not isinstance(report, dict) or "rows" not in report:
        raise InputError(f"--commbench: {report_path} is not a commbench report.json")
    if cluster_name is None and not isinstance(report.get("cluster"), str):
        raise InputError(f"--commbench: {report_path} names no cluster; pass --cluster")
    cluster = load_cluster(cluster_name or report["cluster"])
    try:
        fitted = fit_commbench(report)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise InputError(
            f"--commbench: {report_path} has rows that are not commbench's ({type(exc).__name__})"
        ) from None
    fits = tuple(require_fits(fitted, str(report_path)))
    path = calibration_path(results, cluster)
    meta = {"commbench": str(report_path.resolve()), "cluster": cluster.name}
    save_collectives(path, fits, meta)
    return CommCalibrationReport(fits=fits, cluster=cluster.name, saved_to=path)
