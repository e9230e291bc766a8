"""Calibrations saved per cluster, so later predictions for that cluster use them."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path

from autotune.engines import get_engine
from autotune.errors import InputError
from autotune.estimate.calibrate import BOUNDS
from autotune.estimate.calibration import Calibration, default_calibration
from autotune.estimate.commfit import CollectiveFit, Regime
from autotune.specs import Cluster
from autotune.trial.spec import write_atomically


def calibration_path(results: Path, cluster: Cluster) -> Path:
    return results / "calibration" / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', cluster.name)}.json"


def noise_path(results: Path, cluster: Cluster, kind: str) -> Path:
    """Where the between-trial spread of the cluster's studies of one kind
    (`study.verdict.noise.noise_kind`) is kept, beside its calibration."""
    return calibration_path(results, cluster).with_suffix(f".noise.{kind}.json")


def read_calibration(path: Path, default: Calibration | None = None) -> Calibration:
    """A saved calibration, or an InputError naming the file when it is not one. Parameters
    the file predates (saved before the model had them) are the `default`'s."""
    try:
        stored = json.loads(path.read_text())["calibration"]
        fits = tuple(
            CollectiveFit(**{**f, "regimes": tuple(Regime(**r) for r in f["regimes"])})
            for f in stored.pop("collectives", [])
        )
        calibration = dataclasses.replace(default or Calibration(), **stored, collectives=fits)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(
            f"calibration {path}: unreadable ({type(exc).__name__}); delete it or run "
            "`autotune calibrate` again"
        ) from None
    _check_values(calibration, path)
    return calibration


def _check_values(calibration: Calibration, path: Path) -> None:
    """Each parameter a finite number, positive (or 0 where a fit may reach it) and no more
    than a fit allows (`BOUNDS`): "fast", -1, NaN or 0 would give tracebacks, negative
    tokens/s or NaN."""
    for field in dataclasses.fields(Calibration):
        if field.name == "collectives":
            continue
        value = getattr(calibration, field.name)
        low, high = BOUNDS.get(field.name, (1.0, 1e15))
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value > high or value < 0:
            bad = True
        else:
            bad = value == 0 and low > 0
        if bad:
            floor = "0" if low == 0 else "above 0"
            raise InputError(
                f"calibration {path}: {field.name} {value!r} is not a number from {floor} "
                f"to {high:g}; delete it or run `autotune calibrate` again"
            )


def load_calibration(
    results: Path, cluster: Cluster, engine: str | None = None
) -> tuple[Calibration, str]:
    """The cluster's fitted calibration if one was saved, else the default (the engine's on
    this generation where it has one); and which."""
    path = calibration_path(results, cluster)
    traits = get_engine(engine).traits if engine else None
    default = default_calibration(cluster.device.generation, traits)
    if path.is_file():
        return read_calibration(path, default), f"fitted ({path})"
    own = dict(traits.calibration_overrides) if traits else {}
    owner = f"{engine} on " if cluster.device.generation in own else ""
    return default, f"default for {owner}{cluster.device.generation}"


def save_collectives(
    path: Path, fits: tuple[CollectiveFit, ...], meta: Mapping[str, object]
) -> None:
    """Collective fits into a cluster's saved calibration, keeping what a study fitted: the
    parameters no fit set stay unsaved, the engine's default at every load (Megatron's
    differs from the others')."""
    stored: dict[str, object] = {}
    if path.is_file():
        read_calibration(path)  # an unreadable file is one line, not a traceback
        stored = json.loads(path.read_text())["calibration"]
    stored["collectives"] = [dataclasses.asdict(f) for f in fits]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"calibration": stored, **meta}, indent=2) + "\n")


def save_calibration(path: Path, cal: Calibration, meta: Mapping[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(
        path, json.dumps({"calibration": dataclasses.asdict(cal), **meta}, indent=2) + "\n"
    )
