"""Trials on a slice of the cluster (`autotune run --trial-nodes N`), ranked for the whole.

A slice trial keeps the candidate's model-parallel layout (TP, PP, VPP, CP, EP) and its
micro-batch and accumulation, and runs fewer data-parallel replicas on N of the cluster's
nodes: the slice's global batch is the job's over DP_full/DP_slice. Its measured step time is
extrapolated to the whole cluster by the model's ratio of full to slice step time under the
study's current fit (which the slice trials themselves refit), times the slice-to-full error
measured at full size on this cluster before. A config whose model-parallel group (or whose
states, sharded over fewer replicas) does not fit on the slice is ranked by the model alone
and labelled `model`; one whose states do not fit on the slice (sharded over fewer
replicas) is measured on a shallower proxy, the same layout with fewer layers per pipeline
chunk, and labelled `proxy`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import runner as trials
from autotune.errors import InputError
from autotune.estimate.calibration import Calibration
from autotune.estimate.predict import Estimate, estimate
from autotune.launchers.simulate import predicted_result
from autotune.problem import Problem
from autotune.space import TrainConfig, first_violation
from autotune.specs import Cluster, Workload
from autotune.study.record.trial_attrs import (
    PROXY,
    RANKED_BY,
    RANKED_WHY,
    SLICE_TOKENS,
    TRIAL_NODES,
)
from autotune.trial.spec import StepPlan, TrialSpec


def check_trial_nodes(nodes: int | None, cluster: Cluster) -> None:
    """One-line InputError unless `nodes` is a slice of `cluster` (None: no slice)."""
    if nodes is None:
        return
    if nodes < 1:
        raise InputError(f"--trial-nodes {nodes}: a slice needs at least 1 node")
    if nodes > cluster.nodes:
        raise InputError(
            f"--trial-nodes {nodes}: the cluster {cluster.name} has only {cluster.nodes} nodes"
        )
    if cluster.nodes % nodes:
        raise InputError(
            f"--trial-nodes {nodes} does not divide the cluster's {cluster.nodes} nodes: "
            "a slice runs a whole share of the data-parallel replicas"
        )


@dataclass(frozen=True)
class SliceSettings:
    """What `--trial-nodes` and `--confirm-full` ask."""

    nodes: int
    confirm_full: int = 2
    """Leaders measured at full size before export; 0: none."""
    probes: int = 4
    """Leaders measured again on twice the slice's nodes when the search would first stop
    (where it confirms at full size), to learn how the extrapolation misses as the nodes
    grow (`study.slice.scale`); 0: none."""
    error: float = 0.0
    """log(full / extrapolated) tokens/s measured on this cluster before: the extrapolation
    is moved by it."""


@dataclass(frozen=True)
class Proxy:
    """A shallower stand-in measured where the job's layout does not fit on the slice:
    fewer pipeline stages (each with the job's layers per chunk) where the model-parallel
    group is bigger than the slice, fewer layers per chunk where the states do not fit."""

    pp: int
    layers: int


@dataclass(frozen=True)
class SliceView:
    """A full-size config as its slice trial runs it, or why it cannot."""

    workload: Workload
    cluster: Cluster
    config: TrainConfig
    why_not: str | None = None
    proxy: Proxy | None = None


def slice_cluster(full: Cluster, nodes: int) -> Cluster:
    return dataclasses.replace(full, nodes=nodes)


def slice_view(
    problem: Problem, config: TrainConfig, nodes: int, proxy: Proxy | None = None
) -> SliceView:
    """`config` on `nodes` of the problem's cluster: as many data-parallel replicas as the
    slice holds, the batch shrunk with them (each replica's micro-batch and accumulation as
    in the full job), everything else as in the full job or, given, its proxy's."""
    cluster = slice_cluster(problem.cluster, nodes)
    pp = proxy.pp if proxy else config.pp
    group = config.tp * pp * config.cp
    if cluster.world_size % group:
        why = (
            f"its model-parallel group (TP{config.tp}·PP{pp}·CP{config.cp} = {group} "
            f"devices) does not fit on the slice's {cluster.world_size}"
        )
        return SliceView(problem.workload, problem.cluster, config, why)
    dp = cluster.world_size // group
    w = dataclasses.replace(
        problem.workload,
        global_batch_size=problem.workload.global_batch_size // config.dp * dp,
        num_layers=proxy.layers if proxy else problem.workload.num_layers,
    )
    sliced = dataclasses.replace(config, pp=pp, dp=dp)
    broken = first_violation(sliced, w, cluster, problem.rules)
    if broken is not None:
        return SliceView(w, cluster, sliced, f"on the slice it breaks rule {broken.name}")
    return SliceView(w, cluster, sliced, proxy=proxy)


def observed_as(
    problem: Problem, user_attrs: Mapping[str, Any], config: TrainConfig
) -> tuple[Workload, Cluster, TrainConfig] | None:
    """What a trial measured, for the model's fit: its slice or proxy (or the full job);
    None for a trial the model ranked, which measured nothing."""
    if user_attrs.get(RANKED_BY) == "model":
        return None
    nodes = user_attrs.get(TRIAL_NODES)
    if nodes is None or nodes == problem.cluster.nodes:
        return problem.workload, problem.cluster, config
    proxy = user_attrs.get(PROXY)
    view = slice_view(problem, config, int(nodes), Proxy(**proxy) if proxy else None)
    return view.workload, view.cluster, view.config


@dataclass(frozen=True)
class SlicedTrial:
    """One search trial of a slice study: what it runs (its view of the config: the slice,
    a proxy, or nothing when the model ranks it) and how its outcome becomes the full
    cluster's."""

    problem: Problem
    config: TrainConfig
    view: SliceView
    calibration: Calibration
    error: float

    def spec(self, steps: StepPlan) -> TrialSpec:
        v = self.view
        return TrialSpec(
            engine=self.problem.engine.name,
            workload=v.workload,
            cluster=v.cluster,
            config=v.config,
            steps=steps,
            job=self.problem.job,
        )

    def _full_estimate(self) -> Estimate:
        p = self.problem
        return estimate(p.workload, self.config, p.cluster, p.engine.traits, self.calibration)

    def model_record(self, folder: Path) -> trials.TrialRecord:
        """The model's prediction for the full job, as a trial that launched nothing."""
        e = self._full_estimate()
        folder.mkdir(parents=True, exist_ok=True)
        result = predicted_result(e, self.problem.cluster.world_size)
        kind = "ok" if e.fits else "oom"
        return trials.TrialRecord(
            kind=kind,
            error=None if e.fits else "predicted not to fit at full size",
            folder=folder,
            command=f"model-ranked: {self.view.why_not}",
            wall_s=0.0,
            result=result if e.fits else None,
        )

    def extrapolated(self, record: trials.TrialRecord) -> trials.TrialRecord:
        """The slice's measurement as the full cluster's tokens/s; its step time kept as
        measured (the model is fitted to it as the slice)."""
        r = record.result
        if self.view.why_not or record.kind != "ok" or r is None:
            return record
        p, v = self.problem, self.view
        on_slice = estimate(v.workload, v.config, v.cluster, p.engine.traits, self.calibration)
        ratio = self._full_estimate().step.total_s / on_slice.step.total_s
        full_step = r.step_time_s * ratio * math.exp(-self.error)
        tokens = p.workload.tokens_per_step / full_step
        result = dataclasses.replace(r, tokens_per_s=tokens, world_size=v.cluster.world_size)
        return dataclasses.replace(record, result=result)

    def attrs(self, record: trials.TrialRecord) -> dict[str, Any]:
        """The trial's slice attributes: where it ran, how it is ranked, what it measured."""
        if self.view.why_not:
            return {
                TRIAL_NODES: 0,
                RANKED_BY: "model",
                RANKED_WHY: self.view.why_not,
            }
        measured = None
        if record.result is not None:
            measured = self.view.workload.tokens_per_step / record.result.step_time_s
        proxy = self.view.proxy
        return {
            TRIAL_NODES: self.view.cluster.nodes,
            RANKED_BY: "proxy" if proxy else "slice",
            SLICE_TOKENS: measured,
            **({PROXY: dataclasses.asdict(proxy)} if proxy else {}),
            **({RANKED_WHY: f"measured on PP{proxy.pp}, {proxy.layers} layers"} if proxy else {}),
        }


@dataclass(frozen=True)
class SliceRun:
    """A slice study's trials: which slice, and the calibration they are extrapolated by
    (the study's current fit, read when a trial ends)."""

    settings: SliceSettings
    problem: Problem
    calibration: Callable[[], Calibration]

    def trial(self, config: TrainConfig) -> SlicedTrial:
        """`config`'s slice trial: the job's layout where it fits the slice, else the
        deepest proxy that does, else one the model ranks."""
        cal = self.calibration()
        p, nodes = self.problem, self.settings.nodes
        first = slice_view(p, config, nodes)
        for proxy in [
            None,
            *proxies(p.workload.num_layers, config, nodes * p.cluster.devices_per_node),
        ]:
            view = slice_view(p, config, nodes, proxy)
            if view.why_not is None and self._fits(view, cal):
                return SlicedTrial(p, config, view, cal, self.settings.error)
        why = first.why_not or "its states do not fit on the slice, nor any shallower proxy's"
        view = dataclasses.replace(first, why_not=why)
        return SlicedTrial(p, config, view, cal, self.settings.error)

    def _fits(self, view: SliceView, cal: Calibration) -> bool:
        traits = self.problem.engine.traits
        return estimate(view.workload, view.config, view.cluster, traits, cal).fits


def proxies(layers: int, config: TrainConfig, devices: int) -> list[Proxy]:
    """Shallower stand-ins for `config`, deepest first: the job's pipeline stages (where they
    fit on `devices`), then fewer, each with fewer layers per chunk down to one."""
    per_chunk = max(1, layers // (config.pp * config.vpp))
    found = []
    for pp in (d for d in range(config.pp, 0, -1) if config.pp % d == 0):
        if devices % (config.tp * pp * config.cp):
            continue
        found += [
            Proxy(pp, pp * config.vpp * k)
            for k in range(per_chunk, 0, -1)
            if pp * config.vpp * k < layers
        ]
    return found
