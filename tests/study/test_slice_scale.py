"""The slice study's scale probes and the miss it learns from them (`study.slice.scale`)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import psutil
import pytest

from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.estimate.predict import estimate
from autotune.estimate.ranking import memory_verdicts
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.problem import Problem, load_problem
from autotune.space import TrainConfig
from autotune.specs import Cluster, Workload
from autotune.study import Budget
from autotune.study.loop import run_study
from autotune.study.record.optuna_private import ask_enqueued
from autotune.study.record.storage import StudyRef
from autotune.study.record.trial_attrs import (
    CONFIRMS,
    FULL_OF,
    OWNER,
    RANKED_BY,
    SCALE_PROBE,
    SLICE_TOKENS,
    TRIAL_NODES,
    TrialAttrs,
)
from autotune.study.search.guided.search import GuidedSearch
from autotune.study.settings import SearchSettings
from autotune.study.slice import _claims as slice_claims
from autotune.study.slice._claims import gave_way
from autotune.study.slice.scale import (
    ScaleView,
    fit_scale,
    probe_nodes,
    probes_slope,
    traffic_share,
)
from autotune.study.slice.trials import SliceSettings
from autotune.study.verdict.confirm import standings
from autotune.trial.result import TrialResult
from autotune.trial.spec import TRIAL_FILE, TrialSpec
from tests.fakes import Quiet, add_measured, new_study

CAL = DEFAULT_CALIBRATION["hopper"]


@pytest.mark.parametrize(
    ("nodes", "cluster", "probe"), [(8, 128, 16), (8, 16, None), (3, 12, 6), (4, 12, None)]
)
def test_a_probe_runs_on_twice_the_slice_where_that_is_still_a_slice(
    nodes: int, cluster: int, probe: int | None
) -> None:
    assert probe_nodes(nodes, cluster) == probe


def test_the_miss_grows_with_the_traffic_share_the_probes_show() -> None:
    probes = [(s, 0.01 + 0.2 * s) for s in (0.1, 0.3, 0.5)]  # 0.2 per doubling and share
    fit = fit_scale(probes, [], doublings=4, noise=0.005)
    assert fit.traffic == pytest.approx(0.8, rel=0.02)


def test_leaders_measured_at_full_size_correct_the_probes_slope() -> None:
    """A spine only the whole job crosses: the full-size launches show twice the slope the
    probes foretold, and the fit follows them once two differ enough in share."""
    probes = [(s, 0.2 * s) for s in (0.1, 0.3, 0.5)]
    one = fit_scale(probes, [(0.2, 0.1 + 1.6 * 0.2)], doublings=4, noise=0.005)
    assert one.traffic == pytest.approx(0.8, rel=0.02)  # one launch sets the offset only
    assert one.miss(0.5) == pytest.approx(0.42 + 0.3 * 0.8, rel=0.02)
    two = fit_scale(probes, [(0.1, 0.1 + 0.16), (0.5, 0.1 + 0.8)], doublings=4, noise=0.005)
    assert two.traffic == pytest.approx(1.6, abs=0.1)
    assert two.miss(0.7) == pytest.approx(0.1 + 1.6 * 0.7, abs=0.05)


def test_a_slope_the_probes_cannot_tell_from_noise_is_taken_as_none() -> None:
    """Probes whose shares lie 0.1 apart, on a machine whose launches differ by 5%: a slope
    of 0.1 per doubling is a fraction of its standard error and would move the whole
    cluster's ranking by 0.4 per unit of share; it is dropped. Launches that agree to 0.1%
    keep it nearly whole."""
    probes = [(s, 0.1 * s) for s in (0.2, 0.25, 0.3)]
    assert fit_scale(probes, [], 4, noise=0.05).traffic == 0.0
    assert fit_scale(probes, [], 4, noise=0.001).traffic == pytest.approx(0.4, rel=0.05)
    assert probes_slope(probes, 0.0) == pytest.approx(0.1)


def test_probes_with_alike_shares_or_alone_learn_no_slope() -> None:
    assert fit_scale([(0.3, 0.1)], [], 4, 0.03).traffic == 0.0
    assert fit_scale([(0.3, 0.1), (0.305, 0.2)], [], 4, 0.03).traffic == 0.0


def test_a_scale_probe_stands_for_no_config() -> None:
    study = new_study()
    config = load_problem("megatron", "llama3-8b", "dgx-h100:4", None).config({"tp": 8})
    first = add_measured(study, 1000.0, config)
    add_measured(study, 5000.0, config, **{SCALE_PROBE: first})
    assert [(s.first, s.values) for s in standings(study)] == [(first, (1000.0,))]


SLOWER_PER_DOUBLING = 0.6
"""The world's data-parallel traffic: each doubling of the nodes slows a step by this much
times its traffic share, which the model does not know."""


@dataclass
class ScaleWorld(Launcher):
    """The model's step, slowed by the nodes as `SLOWER_PER_DOUBLING` says."""

    problem: Problem
    name = "scale-world"
    source = "simulated"

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "simulated world"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        step = true_step(self.problem, spec.workload, spec.cluster, spec.config)
        result = TrialResult(
            source="simulated",
            step_time_s=step,
            tokens_per_s=spec.workload.tokens_per_step / step,
            tflops_per_device=0.0,
            mfu=None,
        )
        result.write(request.folder)
        return LaunchOutcome(kind="ok", error=None, wall_s=1.0, result=result)


def true_step(
    problem: Problem, workload: Workload, cluster: Cluster, config: TrainConfig
) -> float:
    p, nodes = problem, cluster.nodes
    full = dataclasses.replace(config, dp=config.dp * (p.cluster.nodes // nodes))
    model = estimate(workload, config, cluster, p.engine.traits, CAL)
    share = traffic_share(p, full, CAL)
    return model.step.total_s * math.exp(SLOWER_PER_DOUBLING * share * math.log2(nodes))


def _study_in_scale_world(
    problem: Problem, settings: SearchSettings, sampler: optuna.samplers.BaseSampler | None = None
) -> optuna.Study:
    """A study of `problem` run to its end in `ScaleWorld`."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    with tempfile.TemporaryDirectory() as tmp:
        run_study(
            problem,
            study,
            ref=StudyRef(name="t", storage_url="memory", folder=Path(tmp)),
            launcher=ScaleWorld(problem),
            progress=Quiet(),
            settings=settings,
        )
    return study


def _first_confirmed(problem: Problem, probes: int) -> tuple[optuna.Study, str, dict[str, float]]:
    """A slice study on 4 of 32 nodes confirming one leader: the study, the key of the
    config it confirmed and the true full-size tokens/s of each config it measured."""
    study = _study_in_scale_world(
        problem,
        SearchSettings(
            budget=Budget(trials=12),
            strategy="random",  # the plan's fit throughout: the world is that model's
            seed=0,
            calibration=CAL,
            slice=SliceSettings(4, confirm_full=1, probes=probes),
        ),
        optuna.samplers.RandomSampler(seed=0),
    )
    full = next(t for t in study.trials if FULL_OF in t.user_attrs)
    truth = {}
    for t in study.trials:
        attrs = TrialAttrs.of(t)
        if t.user_attrs.get(RANKED_BY) in ("slice", "proxy") and attrs.config_key is not None:
            step = true_step(problem, problem.workload, problem.cluster, attrs.config)
            truth[attrs.config_key] = problem.workload.tokens_per_step / step
    key = TrialAttrs.of(full).config_key
    assert key is not None
    return study, key, truth


def test_probes_on_twice_the_slice_confirm_the_config_that_is_fastest_at_full_size() -> None:
    """Where data-parallel traffic slows with the nodes, the slice's plain extrapolation
    overrates the configs that send the most of it; probes on 8 nodes learn by how much,
    and the leader confirmed at full size is the truly fastest the slice measured, not the
    one the plain extrapolation ranks first."""
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    study, confirmed, truth = _first_confirmed(p, probes=4)
    probes = [t for t in study.trials if SCALE_PROBE in t.user_attrs]
    assert len(probes) >= 2 and all(t.user_attrs[TRIAL_NODES] == 8 for t in probes)
    assert confirmed == max(truth, key=truth.__getitem__)
    measured = [s for s in standings(study) if s.trial.user_attrs.get(RANKED_BY) != "full"]
    plain = TrialAttrs.of(max(measured, key=lambda s: s.tokens_per_s).trial).config_key
    assert plain is not None and truth[plain] < 0.98 * truth[confirmed]


def test_a_guided_slice_search_goes_on_under_the_miss_its_probes_learn() -> None:
    """The guided search stops once nothing open could beat its best as the plain
    extrapolation ranks them; its probes then run, and it searches on with every full-size
    prediction moved by the miss they learnt, before any leader is confirmed."""
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    settings = SearchSettings(
        budget=Budget(trials=40), seed=0, calibration=CAL, slice=SliceSettings(4, confirm_full=1)
    )
    study = _study_in_scale_world(p, settings)
    probes = [t.number for t in study.trials if SCALE_PROBE in t.user_attrs]
    full = [t.number for t in study.trials if FULL_OF in t.user_attrs]
    searched = [
        t.number
        for t in study.trials
        if t.user_attrs.get(RANKED_BY) in ("slice", "proxy") and t.number not in probes
    ]
    assert probes and full and max(probes) < min(full)
    assert any(n > max(probes) for n in searched)


def test_a_guide_told_of_the_scale_miss_proposes_configs_that_send_less_traffic() -> None:
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    fits = memory_verdicts(p.workload, p.cluster, p.engine.traits, p.enumerate().valid, CAL)
    guide = GuidedSearch(p, fits.fastest_first, CAL, seed=0)
    first = guide.propose(set())
    guide.rescale(3.0)
    then = guide.propose(set())
    assert first is not None and then is not None
    assert traffic_share(p, then, CAL) < traffic_share(p, first, CAL) - 0.05


@dataclass
class SlowScaleWorld(ScaleWorld):
    """`ScaleWorld`, each launch taking `seconds` of real time."""

    seconds: float = 0.05

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        time.sleep(self.seconds)
        return super().run(request)


def test_a_slice_study_out_of_time_runs_no_probe_and_nothing_at_full_size() -> None:
    """`--max-time` ends the search, and with it the scale probes and the full-size launches
    that would follow (each costs the whole cluster): the winner is the best extrapolation."""
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    study = optuna.create_study(direction="maximize")
    settings = SearchSettings(
        budget=Budget(trials=40, max_time_s=0.4),
        strategy="random",
        seed=0,
        calibration=CAL,
        slice=SliceSettings(4, confirm_full=2),
    )
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_study(
            p,
            study,
            ref=StudyRef(name="t", storage_url="memory", folder=Path(tmp)),
            launcher=SlowScaleWorld(p),
            progress=Quiet(),
            settings=settings,
        )
    assert outcome.stop_reason.startswith("time budget reached")
    assert 1 <= len(study.trials) < 40
    assert not [t for t in study.trials if SCALE_PROBE in t.user_attrs or FULL_OF in t.user_attrs]


def test_of_two_workers_taking_one_probe_at_once_only_one_launches_it() -> None:
    study = new_study()
    mark = {SCALE_PROBE: 3}
    first, second = (ask_enqueued(study, {}, mark, {}) for _ in range(2))
    assert first is not None and second is not None
    assert gave_way(study, first, SCALE_PROBE) is None
    assert gave_way(study, second, SCALE_PROBE) == first.number
    assert study.trials[second.number].state == optuna.trial.TrialState.PRUNED
    # Crossed: the other worker queued its probe first and has not taken it yet, while
    # this one took the newer; this one gives way to it, which the other then runs.
    study = new_study()
    study.enqueue_trial({}, user_attrs=mark)
    newer = ask_enqueued(study, {}, mark, {})
    assert newer is not None and newer.number == 1
    assert gave_way(study, newer, SCALE_PROBE) == 0


def test_a_resumed_slice_study_searches_under_its_probes_miss_from_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its probes ran before the study was stopped: the resumed search proposes under the miss
    they learnt from its first trial, not under the plain extrapolation until it would stop."""
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    settings = SearchSettings(
        budget=Budget(trials=40), seed=0, calibration=CAL, slice=SliceSettings(4, confirm_full=1)
    )
    study = _study_in_scale_world(p, settings)
    assert any(SCALE_PROBE in t.user_attrs for t in study.trials)
    rescaled_at: list[int] = []
    rescale = GuidedSearch.rescale

    def spy(self: GuidedSearch, slope: float) -> None:
        rescaled_at.append(len(study.trials))
        rescale(self, slope)

    monkeypatch.setattr(GuidedSearch, "rescale", spy)
    before = len(study.trials)
    with tempfile.TemporaryDirectory() as tmp:
        run_study(
            p,
            study,
            ref=StudyRef(name="t", storage_url="memory", folder=Path(tmp)),
            launcher=ScaleWorld(p),
            progress=Quiet(),
            settings=dataclasses.replace(settings, budget=Budget(trials=60)),
        )
    assert rescaled_at == [before]


def test_a_guide_told_of_the_scale_miss_refines_the_leader_under_it() -> None:
    """NCCL settings refine the measured leader: once the probes' miss is known, the leader
    is the config the miss ranks first, not the plain extrapolation's, which sends the most
    data-parallel traffic."""
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    fits = memory_verdicts(p.workload, p.cluster, p.engine.traits, p.enumerate().valid, CAL)
    by_share = sorted(fits.configs[:40], key=lambda c: traffic_share(p, c, CAL))
    quiet, loud = by_share[0], by_share[-1]
    assert traffic_share(p, loud, CAL) > traffic_share(p, quiet, CAL) + 0.05
    leaders = []
    for loud_ran in ("slice", "model", "full"):  # a full-size measurement is no guess
        study = new_study()
        add_measured(study, 1000.0, quiet, **{RANKED_BY: "slice", TRIAL_NODES: 4})
        add_measured(study, 1020.0, loud, **{RANKED_BY: loud_ran, TRIAL_NODES: 4})
        guide = GuidedSearch(p, fits.fastest_first, CAL, seed=0)
        guide.learn(study.trials)
        assert guide.leader_measured is not None and guide.leader_measured[0] == loud
        guide.rescale(3.0)
        assert guide.leader_measured is not None
        leaders.append(guide.leader_measured[0])
    assert leaders == [quiet, quiet, loud]


def test_the_slice_repeats_compare_leaders_under_the_miss_and_never_a_full_size_launch() -> None:
    """A slice study's repeats on the slice rank its leaders as the confirmations do: by the
    extrapolation moved by the probes' miss, each leader's launches moved alike; a config's
    full-size launch is no contender there (its standing would pool both)."""
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    study, confirmed, truth = _first_confirmed(p, probes=4)
    view = ScaleView(study, p, 4, lambda: CAL)
    leader = view.ranked()[0]
    repeat = {**leader.trial.user_attrs, CONFIRMS: leader.first}  # a launch 10% slower
    repeat[SLICE_TOKENS] *= 0.9
    study.add_trial(optuna.trial.create_trial(value=leader.trial.value * 0.9, user_attrs=repeat))
    ranked = view.ranked()
    assert all(s.trial.user_attrs[RANKED_BY] in ("slice", "proxy", "model") for s in ranked)
    assert TrialAttrs.of(ranked[0].trial).config_key == confirmed
    plain = [s for s in standings(study) if s.trial.user_attrs[RANKED_BY] != "full"]
    assert plain[0].first != ranked[0].first  # the plain extrapolation ranks another first
    means = [s.log_mean for s in ranked]  # what the repeats compare: in the miss's order
    assert means == sorted(means, reverse=True)
    moved = ranked[0]
    assert len(moved.values) == 2 and moved.values[1] == pytest.approx(0.9 * moved.values[0])


@dataclass
class StoppedOnce(ScaleWorld):
    """`ScaleWorld`, where the first launch on `nodes` is stopped by Ctrl-C."""

    nodes: int = 0
    stopped: bool = False

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        if spec.cluster.nodes == self.nodes and not self.stopped:
            self.stopped = True
            raise KeyboardInterrupt
        return super().run(request)


@pytest.mark.parametrize(("nodes", "mark"), [(8, SCALE_PROBE), (32, FULL_OF)])
def test_a_probe_or_full_size_launch_stopped_midway_runs_again_when_the_study_resumes(
    nodes: int, mark: str
) -> None:
    """Ctrl-C interrupts the first probe on 8 nodes or launch on all 32: the resumed study
    runs that leader's again, not taking it as done, and confirms as many leaders at full
    size as asked."""
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    settings = SearchSettings(
        budget=Budget(trials=40), seed=0, calibration=CAL, slice=SliceSettings(4, confirm_full=2)
    )
    study = optuna.create_study(direction="maximize")
    launcher = StoppedOnce(p, nodes=nodes)
    for attempt in range(2):
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            if attempt == 0:
                stack.enter_context(pytest.raises(KeyboardInterrupt))
            run_study(
                p,
                study,
                ref=StudyRef(name="t", storage_url="memory", folder=Path(tmp)),
                launcher=launcher,
                progress=Quiet(),
                settings=settings,
            )
    marked = [t for t in study.trials if mark in t.user_attrs]
    stopped = next(t for t in marked if TrialAttrs.of(t).kind == "interrupted")
    done = [t for t in marked if t.state == optuna.trial.TrialState.COMPLETE]
    assert stopped.user_attrs[mark] in {t.user_attrs[mark] for t in done}
    full = [t for t in study.trials if FULL_OF in t.user_attrs]
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in full) == 2


def test_no_worker_gives_way_to_a_probe_whose_tuner_died() -> None:
    study = new_study()
    mark = {SCALE_PROBE: 3}
    dead = ask_enqueued(study, {}, mark, {})
    assert dead is not None
    dead.set_user_attr("kind", "interrupted")
    study.tell(dead, state=optuna.trial.TrialState.FAIL)
    mine = ask_enqueued(study, {}, mark, {})
    assert mine is not None and gave_way(study, mine, SCALE_PROBE) is None


def test_a_full_size_launch_another_worker_took_and_died_in_is_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another worker takes the first leader's full-size launch a moment before this one and
    dies in it: this worker gives way, awaits it, and launches that leader itself once the
    other is failed as interrupted; two leaders are measured at full size, as asked."""
    other = subprocess.Popen(["sleep", "60"])
    tag = f"{socket.gethostname()}:{other.pid}:{psutil.Process(other.pid).create_time():.3f}"
    taken: list[int] = []

    def others_first(
        study: optuna.Study, params: dict[str, object], attrs: dict[str, object], dists: dict
    ) -> optuna.Trial | None:
        if FULL_OF in attrs and not taken:
            theirs = ask_enqueued(study, params, attrs, dists)
            assert theirs is not None
            theirs.set_user_attr(OWNER, tag)
            taken.append(theirs.number)
            threading.Timer(0.5, lambda: (other.kill(), other.wait())).start()
        return ask_enqueued(study, params, attrs, dists)

    monkeypatch.setattr(slice_claims, "ask_enqueued", others_first)
    monkeypatch.setattr(slice_claims, "AWAIT_S", 0.1)
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    settings = SearchSettings(
        budget=Budget(trials=40), seed=0, calibration=CAL, slice=SliceSettings(4, confirm_full=2)
    )
    study = _study_in_scale_world(p, settings)
    (theirs,) = (t for t in study.trials if t.number in taken)
    assert TrialAttrs.of(theirs).kind == "interrupted"
    full = [t for t in study.trials if FULL_OF in t.user_attrs]
    done = [t for t in full if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 2 and theirs.user_attrs[FULL_OF] in {t.user_attrs[FULL_OF] for t in done}


def test_a_probe_left_queued_by_a_worker_that_died_is_not_awaited_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another worker queued a probe and died before it took it: this worker gives way to
    it, waits `ORPHANED_S`, then fails it as interrupted, so that it runs the probe itself
    (within seconds here, not never)."""
    monkeypatch.setattr(slice_claims, "ORPHANED_S", 0.2)
    monkeypatch.setattr(slice_claims, "AWAIT_S", 0.05)
    study = new_study()
    mark = {SCALE_PROBE: 3}
    study.enqueue_trial({}, user_attrs=mark)  # the dead worker's, never taken
    mine = ask_enqueued(study, {}, mark, {})
    assert mine is not None and gave_way(study, mine, SCALE_PROBE) == 0
    deadline = time.monotonic() + 10
    slice_claims.await_trials(study, [0], lambda: time.monotonic() < deadline)
    assert time.monotonic() < deadline
    orphan = study.trials[0]
    assert orphan.state == optuna.trial.TrialState.FAIL
    assert TrialAttrs.of(orphan).kind == "interrupted"
