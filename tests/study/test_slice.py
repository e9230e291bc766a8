"""Slice studies (`--trial-nodes`): slice trials keep the layout and shrink DP, configs that do
not fit the slice are measured on a proxy or ranked by the model and labelled so, leaders run
at full size, and the cost is stated in GPU-hours."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import InputError
from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.launchers.base import Launcher, LaunchOutcome, LaunchRequest
from autotune.problem import Problem, load_problem
from autotune.runner import named_nodes, write_config_yaml
from autotune.space import TrainConfig
from autotune.study import Budget
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.record.trial_attrs import (
    AFTER_CHOICE,
    FULL_OF,
    PROXY,
    RANKED_BY,
    SCALE_PROBE,
    SLICE_STUDY,
    TRIAL_NODES,
)
from autotune.study.settings import SearchSettings
from autotune.study.slice.cost import study_cost, trial_gpu_hours
from autotune.study.slice.trials import (
    SliceRun,
    SliceSettings,
    check_trial_nodes,
    observed_as,
    slice_view,
)
from autotune.study.verdict.confirm import standings
from autotune.study.verdict.effort import STANDARD
from autotune.study.verdict.figures import AFTER_CHOICE as FROM_AFTER_CHOICE
from autotune.study.verdict.figures import EXTRAPOLATED, FULL_WITH_CHOICE, winner_figures
from autotune.study.verdict.noise import measurements
from autotune.trial.result import TrialResult
from autotune.trial.spec import RESULT_FILE, TRIAL_FILE, StepPlan, TrialSpec
from autotune.tune import TuneSettings, tune
from tests.fakes import Quiet, add_measured, measured_outcome, new_study


def _problem(cluster: str = "dgx-h100:16", model: str = "llama3-70b") -> Problem:
    return load_problem("megatron", model, cluster, None)


def _slice_run(problem: Problem, nodes: int) -> SliceRun:
    return SliceRun(SliceSettings(nodes), problem, lambda: DEFAULT_CALIBRATION["hopper"])


def test_slice_trials_keep_the_layout_and_shrink_dp() -> None:
    p = _problem()
    config = p.config({"tp": 4, "pp": 4, "vpp": 5, "mbs": 1})
    view = slice_view(p, config, nodes=2)
    assert view.why_not is None and view.cluster.nodes == 2
    sliced = view.config
    assert (sliced.tp, sliced.pp, sliced.vpp, sliced.cp, sliced.mbs) == (4, 4, 5, 1, 1)
    assert (config.dp, sliced.dp) == (8, 1)
    assert view.workload.global_batch_size == p.workload.global_batch_size // 8
    assert sliced.grad_accum(view.workload.global_batch_size) == config.grad_accum(
        p.workload.global_batch_size
    )


def test_a_group_bigger_than_the_slice_is_measured_on_a_shallower_pipeline() -> None:
    p = _problem()
    config = p.config({"tp": 8, "pp": 4, "vpp": 5, "mbs": 1})  # 32 devices, the slice 16
    trial = _slice_run(p, 2).trial(config)
    assert trial.view.why_not is None and trial.view.proxy is not None
    assert trial.view.config.tp == 8 and trial.view.config.pp < 4
    assert trial.view.workload.num_layers < p.workload.num_layers


def test_a_config_that_fits_no_slice_is_ranked_by_the_model() -> None:
    p = _problem()
    config = p.config({"tp": 8, "cp": 2, "pp": 1, "vpp": 1, "mbs": 1})  # 16 devices, no pp
    trial = _slice_run(p, 1).trial(config)
    assert trial.view.why_not is not None and "does not fit" in trial.view.why_not
    assert trial.attrs(trial.model_record(Path("/nonexistent-unused")))[RANKED_BY] == "model"


@pytest.mark.parametrize("nodes", [0, -1, 17, 3])
def test_bad_trial_nodes_are_refused_in_one_line(nodes: int) -> None:
    with pytest.raises(InputError) as caught:
        check_trial_nodes(nodes, _problem().cluster)
    assert "--trial-nodes" in str(caught.value) and "\n" not in str(caught.value)


def test_a_slice_study_names_nodes_confirms_at_full_size_and_costs_gpu_hours(
    tmp_path: Path,
) -> None:
    p = load_problem("megatron", "llama3-8b", "dgx-h100:4", None)
    settings = TuneSettings(
        budget=Budget(trials=4),
        launcher="simulate",
        results=tmp_path,
        seed=0,
        slice=SliceSettings(1, confirm_full=1),
    )
    said: list[str] = []
    tuned = tune(p, settings, Quiet(), said.append)
    trials = tuned.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    full = [t for t in trials if FULL_OF in t.user_attrs]
    assert len(full) == 1 and full[0].user_attrs[TRIAL_NODES] == 4
    probes = [t for t in trials if SCALE_PROBE in t.user_attrs]
    assert probes and all(t.user_attrs[TRIAL_NODES] == 2 for t in probes)
    sliced = [
        t for t in trials if t.user_attrs.get(RANKED_BY) in ("slice", "proxy") and t not in probes
    ]
    assert sliced and all(t.user_attrs[TRIAL_NODES] == 1 for t in sliced)
    folder = Path(sliced[0].user_attrs["folder"])
    assert yaml.safe_load((folder / "config.yaml").read_text())["nodes"] == 1
    cost = study_cost(tuned.study, p.cluster)
    assert cost.gpu_hours == pytest.approx(sum(trial_gpu_hours(t, p.cluster) for t in trials))
    assert 0 < cost.gpu_hours < cost.full_gpu_hours
    assert any(line.startswith("cost: ") and "GPU-hours" in line for line in said)
    assert any(line.startswith("slice-to-full error") for line in said)
    best = yaml.safe_load((tuned.ref.folder / "best" / "best.yaml").read_text())
    assert best["cluster"] == "dgx-h100:4" and best["config"]["dp"] * 8 >= 8
    assert best["slice"]["trial_nodes"] == 1 and best["slice"]["gpu_hours"] > 0
    assert (tmp_path / "calibration" / "dgx-h100_4.slice.json").exists()
    assert tuned.report is not None and "GPU-hours" in tuned.report.read_text()


def test_the_model_is_fitted_to_each_trial_as_what_it_ran() -> None:
    p = _problem()
    config = p.config({"tp": 4, "pp": 4, "vpp": 5, "mbs": 1})
    seen = observed_as(p, {TRIAL_NODES: 2, RANKED_BY: "slice"}, config)
    assert seen is not None and seen[1].nodes == 2 and seen[2].dp == 1
    proxy = {TRIAL_NODES: 2, RANKED_BY: "proxy", PROXY: {"pp": 2, "layers": 40}}
    seen = observed_as(p, proxy, config)
    assert seen is not None and seen[0].num_layers == 40 and seen[2].pp == 2
    assert observed_as(p, {TRIAL_NODES: 0, RANKED_BY: "model"}, config) is None
    assert observed_as(p, {}, config) == (p.workload, p.cluster, config)


class FullSizeIsSlower(Launcher):
    """A measured cluster on which the whole job runs at 40% of what its slice extrapolates
    to (what the model cannot see: stragglers, the network beyond the slice); launches of one
    config land 5% apart, in turn above and below."""

    name = "full-size-is-slower"
    source = "measured"

    def __init__(self, full_nodes: int) -> None:
        self.full_nodes, self.launches = full_nodes, 0
        self.against: list[float | None] = []
        """Each trial's step time to beat (`StepPlan.best_s`)."""

    def command(self, request: LaunchRequest) -> list[str]:
        return ["echo", "measured"]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        spec = TrialSpec.from_json((request.folder / TRIAL_FILE).read_text())
        self.launches += 1
        self.against.append(spec.steps.best_s)
        step = 1.0 * (2.5 if spec.cluster.nodes == self.full_nodes else 1.0)
        step *= math.exp(0.05 if self.launches % 2 else -0.05)
        return measured_outcome(request, spec, step)


def test_a_confirmed_slice_study_states_figures_measured_at_full_size(tmp_path: Path) -> None:
    """The winner is repeated after its choice at full size, not on the slice; its figures
    come from those launches, and no standing pools slice and full-size launches; no trial
    is measured against another's step time (a slice's and a full-size launch's differ)."""
    p = load_problem("megatron", "llama3-8b", "dgx-h100:4", None)
    study = new_study(between=0.05)
    launcher = FullSizeIsSlower(p.cluster.nodes)
    run_study(
        p,
        study,
        ref=StudyRef("t", "memory", tmp_path),
        launcher=launcher,
        progress=Quiet(),
        settings=SearchSettings(
            budget=Budget(trials=3),
            calibration=DEFAULT_CALIBRATION["hopper"],
            slice=SliceSettings(1, confirm_full=1),
        ),
    )
    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    after = [t for t in trials if t.user_attrs.get(AFTER_CHOICE)]
    assert len(after) == STANDARD.after_choice
    assert all(t.user_attrs[TRIAL_NODES] == 4 and t.user_attrs[RANKED_BY] == "full" for t in after)
    for launches in measurements(study).values():
        assert len({t.user_attrs[TRIAL_NODES] for t in launches}) == 1
    figures = winner_figures(study)
    assert figures is not None and figures.method == FROM_AFTER_CHOICE
    assert sorted(figures.basis.values) == sorted(t.value for t in after)
    full = statistics.geometric_mean(t.value or 0.0 for t in after)
    assert figures.tokens_per_s == pytest.approx(full)
    on_slice = [s for s in standings(study) if s.trial.user_attrs[RANKED_BY] != "full"]
    extrapolated = max(s.tokens_per_s for s in on_slice)
    assert figures.tokens_per_s < 0.5 * extrapolated
    assert figures.runner_up is None and not figures.extrapolated  # one config at full size
    assert figures.among == "configs measured on the slice"
    assert launcher.against and not any(launcher.against)


def test_slice_figures_without_full_size_launches_are_labelled_extrapolated() -> None:
    config = TrainConfig(mbs=1)
    study = new_study(between=0.05)
    study.set_user_attr(SLICE_STUDY, 1)
    add_measured(study, 200.0, config, **{RANKED_BY: "slice", TRIAL_NODES: 1})
    add_measured(study, 100.0, TrainConfig(mbs=2), **{RANKED_BY: "slice", TRIAL_NODES: 1})
    figures = winner_figures(study)
    assert figures is not None and figures.extrapolated
    assert EXTRAPOLATED in figures.method and figures.as_dict()["extrapolated_from_slice"]


def test_the_full_size_winner_is_compared_with_full_size_leaders_only() -> None:
    study = new_study(between=0.05)
    study.set_user_attr(SLICE_STUDY, 1)
    a, b = TrainConfig(mbs=1), TrainConfig(mbs=2)
    first_a = add_measured(study, 300.0, a, **{RANKED_BY: "slice", TRIAL_NODES: 1})
    first_b = add_measured(study, 250.0, b, **{RANKED_BY: "slice", TRIAL_NODES: 1})
    add_measured(study, 100.0, b, **{RANKED_BY: "full", TRIAL_NODES: 4, FULL_OF: first_b})
    add_measured(study, 110.0, a, **{RANKED_BY: "full", TRIAL_NODES: 4, FULL_OF: first_a})
    figures = winner_figures(study)
    assert figures is not None and figures.method == FULL_WITH_CHOICE
    assert figures.tokens_per_s == pytest.approx(110.0)
    assert figures.runner_up is not None and figures.runner_up.ratio == pytest.approx(1.1)
    assert figures.median == pytest.approx(300.0 / 250.0)  # read on the slice, of the others


def test_a_trial_names_the_nodes_it_ran_on_in_config_yaml_and_result_json(
    tmp_path: Path,
) -> None:
    p = _problem()
    spec = p.trial_spec(p.config({"tp": 4, "pp": 4, "vpp": 5, "mbs": 1}), StepPlan())
    write_config_yaml(spec, tmp_path)
    result = TrialResult(source="measured", step_time_s=1.0, tokens_per_s=1.0,
                         tflops_per_device=0.0, mfu=None)  # fmt: skip
    named = named_nodes(spec, tmp_path, result, "at2n[1-2]")
    assert named is not None and (named.nodes, named.ran_on) == (16, "at2n[1-2]")
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert (config["nodes"], config["ran_on"]) == (16, "at2n[1-2]")
    written = json.loads((tmp_path / RESULT_FILE).read_text())
    assert (written["nodes"], written["ran_on"]) == (16, "at2n[1-2]")
    assert named_nodes(spec, tmp_path, result, None) is result  # a simulated trial: nowhere
