"""Slice studies (`--trial-nodes`): slice trials keep the layout and shrink DP, configs that do
not fit the slice are measured on a proxy or ranked by the model and labelled so, leaders run
at full size, and the cost is stated in GPU-hours."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import InputError
from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.problem import Problem, load_problem
from autotune.study import Budget
from autotune.study.slice import (
    FULL_OF,
    PROXY,
    RANKED_BY,
    TRIAL_NODES,
    SliceRun,
    SliceSettings,
    check_trial_nodes,
    observed_as,
    slice_view,
)
from autotune.study.slice_cost import study_cost, trial_gpu_hours
from autotune.tune import TuneSettings, tune
from tests.fakes import Quiet


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
    sliced = [t for t in trials if t.user_attrs.get(RANKED_BY) in ("slice", "proxy")]
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
