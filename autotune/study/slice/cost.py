"""What a study's trials cost in GPU-hours and node-hours, and what the same search would
have cost with every trial at full size. A measured trial is charged its wall time; a
simulated one what a real trial of its step time would take (`SIMULATED_TRIAL_S` plus
`SIMULATED_STEPS` steps); a trial the model ranked costs nothing."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.specs import Cluster
from autotune.study.record.trial_attrs import (
    RANKED_BY,
    SLICE_ERROR,
    SLICE_STUDY,
    TRIAL_NODES,
    TrialAttrs,
)

SIMULATED_TRIAL_S = 90.0
"""Launch, imports and initialisation of a real large-model trial (benchmarks/search.py)."""
SIMULATED_STEPS = 30
"""Warm-up and measured steps of a real trial."""


@dataclass(frozen=True)
class Cost:
    gpu_hours: float
    node_hours: float
    full_gpu_hours: float
    """The same search trials, each run on the whole cluster."""
    trials: int


def trial_seconds(trial: FrozenTrial) -> float:
    """How long the trial held its nodes (0 for a model-ranked one)."""
    attrs = TrialAttrs.of(trial)
    if trial.user_attrs.get(RANKED_BY) == "model":
        return 0.0
    if attrs.source == "measured":
        return attrs.wall_s or 0.0
    return SIMULATED_TRIAL_S + SIMULATED_STEPS * (attrs.step_time_s or 0.0)


def trial_nodes(trial: FrozenTrial, cluster: Cluster) -> int:
    """The nodes the trial ran on: its slice's, or the cluster's."""
    nodes = trial.user_attrs.get(TRIAL_NODES)
    return cluster.nodes if nodes is None else int(nodes)


def trial_gpu_hours(trial: FrozenTrial, cluster: Cluster) -> float:
    return trial_seconds(trial) * trial_nodes(trial, cluster) * cluster.devices_per_node / 3600


def study_cost(study: optuna.Study, cluster: Cluster) -> Cost:
    """The study's trials (complete or failed), summed."""
    ran = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
    seconds = [(trial_seconds(t), trial_nodes(t, cluster)) for t in ran]
    node_hours = sum(s * n for s, n in seconds) / 3600
    searched = [  # the search's own trials: not its probes, not its full-size launches
        trial_seconds(t) or _model_seconds(t)
        for t in ran
        if t.user_attrs.get(RANKED_BY) != "full" and TrialAttrs.of(t).scale_probe_of is None
    ]
    full = sum(searched) * cluster.world_size / 3600
    return Cost(node_hours * cluster.devices_per_node, node_hours, full, len(ran))


def _model_seconds(trial: FrozenTrial) -> float:
    """A model-ranked trial's length, had it run: a simulated trial of its predicted step."""
    if trial.user_attrs.get(RANKED_BY) != "model":
        return 0.0
    return SIMULATED_TRIAL_S + SIMULATED_STEPS * (TrialAttrs.of(trial).step_time_s or 0.0)


def cost_line(cost: Cost) -> str:
    """The summary's line."""
    share = cost.gpu_hours / cost.full_gpu_hours if cost.full_gpu_hours else 0.0
    return (
        f"cost: {cost.gpu_hours:,.1f} GPU-hours ({cost.node_hours:,.1f} node-hours) over "
        f"{cost.trials} trials; at full size the same search: {cost.full_gpu_hours:,.1f} "
        f"GPU-hours ({share:.1%} of it spent)"
    )


def ranked_line(study: optuna.Study) -> str:
    """How the study's trials were ranked: on the slice, by the model, at full size."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    count = Counter(
        "probe" if TrialAttrs.of(t).scale_probe_of is not None else t.user_attrs.get(RANKED_BY)
        for t in done
    )
    probes = f", {count['probe']} measured again on twice its nodes" if count["probe"] else ""
    return (
        f"trials on a slice of {study.user_attrs.get(SLICE_STUDY)} nodes: {count['slice']} "
        f"measured there and extrapolated, {count['proxy']} on a shallower proxy (fewer "
        f"pipeline stages or layers per chunk: the layout or its states do not fit the "
        f"slice), {count['model']} ranked by the model (not even a proxy fits){probes}, "
        f"{count['full']} at full size"
    )


def slice_summary(study: optuna.Study, cluster: Cluster) -> dict[str, object]:
    """best.yaml's `slice` section: the slice, the cost, the slice-to-full error; empty
    for a study on the whole cluster."""
    if study.user_attrs.get(SLICE_STUDY) is None:
        return {}
    cost = study_cost(study, cluster)
    return {
        "slice": {
            "trial_nodes": study.user_attrs.get(SLICE_STUDY),
            "gpu_hours": round(cost.gpu_hours, 3),
            "node_hours": round(cost.node_hours, 3),
            "full_size_gpu_hours": round(cost.full_gpu_hours, 3),
            "slice_to_full_error": study.user_attrs.get(SLICE_ERROR),
        }
    }
