"""A trial that spans nodes, judged on each node's compute time in its profiled step: one node
well over its peers' is named, the trial is not read as its config's speed, and a study that
cannot keep that node out of its trials stops in one line."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import optuna
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from autotune import runner
from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.nodes.judge import slow_in_trial
from autotune.problem import load_problem
from autotune.rank.measure import node_compute_s, profile_summary, profiler
from autotune.space import TrainConfig
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.record.verdicts import verdicts
from autotune.study.settings import Budget, SearchSettings, StudyOutcome
from autotune.trial.result import TrialResult
from autotune.trial.spec import TRIAL_FILE, StepPlan, TrialSpec
from tests.fakes import Quiet, measured_outcome, new_study

optuna.logging.set_verbosity(optuna.logging.ERROR)


def test_a_node_far_over_its_peers_compute_is_named_and_healthy_spread_is_not() -> None:
    assert slow_in_trial({"n1": 0.015, "n2": 0.073}, step_s=0.1) == {
        "n2": "compute 4.87x its peers' time in the profiled step, 58% of a step"
    }
    assert slow_in_trial({"n1": 0.10, "n2": 0.13, "n3": 0.11, "n4": 0.12}, step_s=0.2) == {}
    assert list(slow_in_trial({"n1": 0.1, "n2": 0.1, "n3": 0.3, "n4": 0.1}, step_s=0.4)) == ["n3"]
    assert slow_in_trial({"n1": 0.5}, step_s=1.0) == {}


def test_a_node_slow_at_what_is_a_small_share_of_the_step_leaves_the_trial_the_configs() -> None:
    """A small model's compute on a shared host: 1.7x in one profiled step, a tenth of it."""
    assert slow_in_trial({"at2n1": 0.014, "at2n2": 0.024}, step_s=0.1) == {}
    assert list(slow_in_trial({"at2n1": 0.014, "at2n2": 0.024}, step_s=0.03)) == ["at2n2"]


def test_pipeline_stages_split_over_nodes_do_unlike_work_and_are_not_judged() -> None:
    problem = load_problem("torch", "tiny", "local:2")
    result = TrialResult(
        source="measured", step_time_s=1.0, tokens_per_s=1.0, tflops_per_device=0.0,
        mfu=None, node_compute_s={"n1": 0.1, "n2": 0.5},
    )  # fmt: skip
    flat = problem.trial_spec(TrainConfig(dp=2), StepPlan())
    staged = problem.trial_spec(TrainConfig(pp=2), StepPlan())
    assert list(runner.slow_nodes(flat, result)) == ["n2"]
    assert runner.slow_nodes(staged, result) == {}


def _step(rank: int, weight: torch.Tensor) -> None:
    """One step: node n2's compute takes 20x node n1's, then both meet in an all-reduce."""
    a = torch.randn(256, 256)
    for _ in range(5 if rank == 0 else 100):
        a = torch.tanh(a @ weight)
    dist.all_reduce(a)


def _two_nodes(rank: int, port: int, out: str) -> None:
    """A rank of a two-node trial on gloo (one rank a node): a warm-up step, a measured one,
    then a profiled one, as a trial times its steps and profiles its last."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE="1",
        SLURMD_NODENAME=f"n{rank + 1}",
    )  # fmt: skip
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    weight = torch.randn(256, 256)
    _step(rank, weight)  # warm-up, as a trial's first steps
    start = time.perf_counter()
    _step(rank, weight)
    step_s = time.perf_counter() - start
    with profiler(torch.device("cpu")) as prof:
        start = time.perf_counter()
        _step(rank, weight)
        wall = time.perf_counter() - start
    found = node_compute_s(profile_summary(prof, wall))
    if rank == 0:
        Path(out).write_text(repr(sorted(slow_in_trial(found, step_s=step_s))))
    dist.destroy_process_group()


def test_each_node_of_a_real_gloo_trial_reports_its_compute_and_the_slow_one_shows(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "slow.txt"
    mp.spawn(_two_nodes, args=(port, str(out)), nprocs=2)
    assert out.read_text() == "['n2']"


class SlowSecondNode(Launcher):
    """Trials on two hosts, the second computing 5x longer than the first."""

    name = "two-hosts"
    source = "measured"

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "two hosts"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        return measured_outcome(request, spec, 0.2, node_compute_s={"h1": 0.02, "h2": 0.1})


def two_host_study(
    launcher: Launcher, trials: int, tmp_path: Path
) -> tuple[optuna.Study, StudyOutcome]:
    """A study of up to `trials` trials on two hosts, run through `launcher`."""
    study = new_study()
    outcome = run_study(
        load_problem("torch", "llama3-8b", "dgx-h100:2"),
        study,
        ref=StudyRef("t", "memory", tmp_path),
        launcher=launcher,
        progress=Quiet(),
        settings=SearchSettings(
            budget=Budget(trials=trials), calibration=DEFAULT_CALIBRATION["hopper"]
        ),
    )
    return study, outcome


def test_a_node_found_slow_twice_stops_a_study_whose_launcher_cannot_avoid_it(
    tmp_path: Path,
) -> None:
    study, outcome = two_host_study(SlowSecondNode(), 8, tmp_path)
    trials = study.get_trials()
    assert len(trials) == 2  # the first finding is confirmed by a second trial
    assert all(t.user_attrs["kind"] == "slow_node" and t.value is None for t in trials)
    assert outcome.stop_reason.startswith("slow node h2 (compute 5.00x its peers' time")
    assert outcome.stop_reason.endswith("the two-hosts launcher cannot keep a node out of trials")
    assert verdicts(study) == {}  # the config may run again, on other nodes


class SlowOnce(SlowSecondNode):
    """Host h2 computes 5x longer in the first trial only: a busy moment, not a slow node."""

    def __init__(self) -> None:
        self.launches = 0

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        self.launches += 1
        h2 = 0.1 if self.launches == 1 else 0.021
        return measured_outcome(request, spec, 0.2, node_compute_s={"h1": 0.02, "h2": h2})


def test_a_node_found_slow_once_and_not_again_stays_and_the_study_goes_on(
    tmp_path: Path,
) -> None:
    study, outcome = two_host_study(SlowOnce(), 4, tmp_path)
    kinds = [t.user_attrs["kind"] for t in study.get_trials()]
    assert kinds[0] == "slow_node" and kinds.count("ok") >= 3, kinds
    assert "slow node" not in outcome.stop_reason
