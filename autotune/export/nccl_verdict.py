"""Whether the best trial's NCCL settings go into the export: only where they beat the same
layout with NCCL's own choices, measured, by more than the measurement noise."""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from autotune.space import TrainConfig, config_key, nccl_default
from autotune.study.confirm import standing
from autotune.study.noise import noise
from autotune.study.trial_attrs import CONFIG


@dataclass(frozen=True)
class NcclVerdict:
    trial: FrozenTrial
    """The trial to export."""
    note: str | None
    """What nccl.env says of the NCCL settings (None: the winner uses NCCL's defaults)."""


def _config(trial: FrozenTrial) -> TrainConfig:
    return TrainConfig(**trial.user_attrs[CONFIG])


def nccl_verdict(study: optuna.Study, best: FrozenTrial) -> NcclVerdict:
    config = _config(best)
    if config == nccl_default(config):
        return NcclVerdict(best, None)
    done = [t for t in standing(study) if CONFIG in t.user_attrs]
    layout = config_key(nccl_default(config))
    baselines = [t for t in done if config_key(_config(t)) == layout]
    settings = f"NCCL_ALGO={config.nccl_algo}, NCCL_PROTO={config.nccl_proto}"
    if baselines:
        baseline = max(baselines, key=lambda t: t.value or 0.0)
        gain = (best.value or 0.0) / (baseline.value or 1.0) - 1
        margin = noise(best, baseline)
        if gain > margin:
            version = best.user_attrs.get("nccl_version") or "unknown"
            return NcclVerdict(
                best,
                f"Measured gain of {settings}: {gain:+.1%} over NCCL's default (trial "
                f"{baseline.number}; noise {margin:.1%}), NCCL {version}.",
            )
        why = f"{gain:+.1%} over NCCL's default (trial {baseline.number}) is within noise"
    else:
        why = "it was never measured against NCCL's default"
    plain = [t for t in done if _config(t) == nccl_default(_config(t))]
    fallback = max(plain, key=lambda t: t.value or 0.0, default=None)
    return NcclVerdict(
        fallback or best,
        f"Trial {best.number}'s {settings} is not kept: {why}. Nothing is set.",
    )
