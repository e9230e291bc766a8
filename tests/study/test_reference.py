"""The user's config is the loss-parity reference, always: it runs first, again when its run
failed, and once more reseeded; nothing else is judged before it, and a study that cannot
make one says so. The search learns what breaks parity and spends its budget elsewhere."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.estimate.calibration import DEFAULT_CALIBRATION
from autotune.problem import Problem, load_problem
from autotune.space import TrainConfig, config_key
from autotune.study.loop import run_study
from autotune.study.record.storage import StudyRef
from autotune.study.record.trial_attrs import NO_REFERENCE, PARITY_RESEED, USERS_CONFIG, TrialAttrs
from autotune.study.settings import Budget, SearchSettings
from autotune.study.verdict.confirm import standings
from autotune.study.verdict.parity import DIFFERS, study_band
from autotune.study.verdict.parity_cause import read_causes
from autotune.study.verdict.parity_verdict import study_parity
from tests.fakes import LossWorld, Quiet, new_study
from tests.paths import REPO

optuna.logging.set_verbosity(optuna.logging.ERROR)
SCRIPTS = REPO / "tests" / "data" / "user_scripts"
SPACE = (
    "engine: deepspeed\nknobs:\n  zero: [0, 1, 2, 3]\n  mbs: [1, 2, 4, 8]\n"
    "  reduce_bucket: [50000000, 500000000]\n  overlap_comm: [false, true]\n"
)
YOURS = TrainConfig(dp=2, mbs=8)
"""ds_config.json's: ZeRO 0, micro-batch 8 of the global batch 16 on two ranks."""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """The DeepSpeed test script and its config in a folder of the user's, as the cwd."""
    for name in ("ds_train.py", "ds_config.json", "plain_train.py"):
        shutil.copy(SCRIPTS / name, tmp_path / name)
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "mbs.yaml").write_text("engine: deepspeed\nknobs:\n  mbs: [1, 2, 4, 8]\n")
    (tmp_path / "plain.yaml").write_text("engine: torch\nknobs:\n  mbs: [1, 2, 4, 8]\n")
    small = json.loads((tmp_path / "ds_config.json").read_text())
    small["train_micro_batch_size_per_gpu"] = 2  # 4 micro-batches a step: the model moves it
    (tmp_path / "ds_small.json").write_text(json.dumps(small))
    here = Path.cwd()
    os.chdir(tmp_path)
    yield tmp_path
    os.chdir(here)


def ds_problem(space: str = "space.yaml", config: str = "ds_config.json") -> Problem:
    command = ["ds_train.py", "--deepspeed_config", config]
    return load_problem("deepspeed", "tiny", "local:2", space, command)


def studied(
    problem: Problem, world: LossWorld, trials: int, folder: Path, strategy: str = "guided"
) -> optuna.Study:
    study = new_study()
    run_study(
        problem,
        study,
        ref=StudyRef("t", "memory", folder),
        launcher=world,
        progress=Quiet(),
        settings=SearchSettings(
            budget=Budget(trials=trials, confirm=False),
            calibration=DEFAULT_CALIBRATION["hopper"],
            strategy=strategy,
        ),
    )
    return study


def ran(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials() if TrialAttrs.of(t).config_values is not None]


def test_your_config_runs_first_and_again_reseeded_before_anything_else(project: Path) -> None:
    world = LossWorld(YOURS, breaks=("mbs",))
    study = studied(ds_problem(), world, 5, project)
    first, second = ran(study)[:2]
    assert TrialAttrs.of(first).config_key == study.user_attrs[USERS_CONFIG] == config_key(YOURS)
    assert TrialAttrs.of(second).config_key == config_key(YOURS)
    assert second.user_attrs[PARITY_RESEED] is not None
    assert world.specs[1].parity.reseed is not None and world.specs[0].parity.reseed is None
    # every later trial is given the user's curve and floors, to stop once it leaves them
    assert all(spec.parity.reference for spec in world.specs[2:])
    band = study_band(study, "bf16")
    assert band is not None and band.reseeded == 1


def test_a_failed_first_launch_of_your_config_is_run_again_and_parity_holds(
    project: Path,
) -> None:
    """A script that crashed on its first launch (a cache being built) once had every
    later trial accepted unjudged; now the user's config runs again first."""
    world = LossWorld(YOURS, breaks=("mbs",), fail_users=1)
    study = studied(ds_problem("mbs.yaml"), world, 4, project, strategy="grid")
    runs = [t for t in ran(study) if TrialAttrs.of(t).config_key == config_key(YOURS)]
    assert [t.state for t in runs[:2]] == [TrialState.FAIL, TrialState.COMPLETE]
    assert [TrialAttrs.of(t).config_key for t in ran(study)[:3]] == [config_key(YOURS)] * 3
    moved = [t for t in ran(study) if TrialAttrs.of(t).config.mbs != YOURS.mbs]
    assert moved and all(TrialAttrs.of(t).kind == DIFFERS for t in moved)
    verdict = study_parity(study, config_key(YOURS), "bf16")
    assert verdict.verdict != "not_checked" and len(verdict.differing) == len(moved)


def test_your_config_out_of_memory_is_no_reference_and_nothing_is_called_same(
    project: Path,
) -> None:
    """A config that cannot fit is not launched again: no reference can be made, the study
    says why, searches on, and judges nothing."""
    world = LossWorld(YOURS, breaks=("mbs",), fail_users=10, users_fail_as="oom")
    study = studied(ds_problem(), world, 6, project)
    runs = [t for t in ran(study) if TrialAttrs.of(t).config_key == config_key(YOURS)]
    assert len(runs) == 1 and runs[0].state == TrialState.FAIL
    assert "your config failed 1 time, last oom" in study.user_attrs[NO_REFERENCE]
    assert not any(TrialAttrs.of(t).kind == DIFFERS for t in ran(study))
    other = next(t for t in ran(study) if t.state == TrialState.COMPLETE)
    verdict = study_parity(study, TrialAttrs.of(other).config_key, "bf16")
    assert verdict.verdict == "not_checked"
    assert "the export is not known to train your model" in verdict.why


def test_your_config_crashing_alike_twice_stops_the_study(project: Path) -> None:
    """A crash once is run again (a cache being built); the same crash twice, before any
    config was measured, is the script's fault: every trial would fail alike."""
    world = LossWorld(YOURS, breaks=("mbs",), fail_users=10)
    study = new_study()
    outcome = run_study(
        ds_problem(),
        study,
        ref=StudyRef("t", "memory", project),
        launcher=world,
        progress=Quiet(),
        settings=SearchSettings(
            budget=Budget(trials=6, confirm=False), calibration=DEFAULT_CALIBRATION["hopper"]
        ),
    )
    assert len(ran(study)) == 2
    assert outcome.stop_reason.startswith("the script failed alike 2 times before any config")


def test_a_helper_scripts_reference_is_the_config_you_state(project: Path) -> None:
    """With `autotune.step` the study's first trial (the model's pick) was the reference;
    now it is the config the user states they run."""
    command = ["plain_train.py"]
    problem = load_problem("torch", "tiny", "local:2", "plain.yaml", command, "mbs=2")
    yours = problem.users_config()
    assert yours is not None and yours.mbs == 2
    world = LossWorld(yours, breaks=("mbs",))
    study = studied(problem, world, 4, project)
    assert study.user_attrs[USERS_CONFIG] == config_key(yours)
    assert TrialAttrs.of(ran(study)[0]).config.mbs == 2
    assert all(TrialAttrs.of(t).kind == DIFFERS for t in ran(study) if t.number > 1)
    verdict = study_parity(study, config_key(yours), "bf16")
    assert verdict.reference is not None and "--users-config" in verdict.reference


def test_without_your_config_a_helper_study_judges_nothing_and_says_why(project: Path) -> None:
    problem = load_problem("torch", "tiny", "local:2", "plain.yaml", ["plain_train.py"])
    world = LossWorld(TrainConfig(dp=2, mbs=4), breaks=("mbs",))
    study = studied(problem, world, 3, project)
    assert USERS_CONFIG not in study.user_attrs
    assert "--users-config" in study.user_attrs[NO_REFERENCE]
    assert not any(TrialAttrs.of(t).kind == DIFFERS for t in ran(study))
    best = next(t for t in ran(study) if t.state == TrialState.COMPLETE)
    verdict = study_parity(study, TrialAttrs.of(best).config_key, "bf16")
    assert verdict.verdict == "not_checked"


def test_the_search_learns_the_move_that_breaks_parity(project: Path) -> None:
    """A script whose learning rate follows the micro-batch: after the first `differs`, at
    most two trials move the micro-batch again (one to tell the cause), and at least three
    tune ZeRO, buckets and overlap at the user's micro-batch."""
    problem = ds_problem(config="ds_small.json")
    yours = problem.users_config()
    assert yours is not None and yours.mbs == 2
    world = LossWorld(yours, breaks=("mbs",))
    study = studied(problem, world, 8, project)
    trials = [t for t in ran(study) if t.user_attrs.get(PARITY_RESEED) is None]
    first = next(i for i, t in enumerate(trials) if TrialAttrs.of(t).kind == DIFFERS)
    after = trials[first + 1 :]
    moved = [t for t in after if TrialAttrs.of(t).config.mbs != yours.mbs]
    kept = [t for t in after if TrialAttrs.of(t).config.mbs == yours.mbs]
    assert len(moved) <= 2
    assert len(kept) >= 3
    causes = read_causes(study)
    assert causes is not None and causes.held() == {"mbs": 2}
    named = causes.named()
    assert named is not None and named.startswith("the micro-batch (mbs 2->")


def test_a_failure_that_repeats_alike_at_one_value_is_not_proposed_again(project: Path) -> None:
    """The user's script cannot run at micro-batch 8 (`view size is not compatible`, at
    any ZeRO stage): after two such crashes no config with it is proposed again."""
    problem = ds_problem(config="ds_small.json")
    yours = problem.users_config()
    assert yours is not None
    study = studied(problem, LossWorld(yours, crashes={"mbs": 8}), 8, project)
    crashed = [t for t in ran(study) if TrialAttrs.of(t).kind == "crash"]
    assert 2 <= len(crashed) <= 3, "two or three alike crashes ban micro-batch 8"
    causes = read_causes(study)
    assert causes is not None and [b.values for b in causes.banned] == [{"mbs": 8}]
    later = [t for t in ran(study) if t.number > max(c.number for c in crashed)]
    assert len(later) >= 3 and all(TrialAttrs.of(t).config.mbs != 8 for t in later)


def test_a_break_that_shows_only_late_is_caught_before_export_and_named(project: Path) -> None:
    """Trials shorter than the break takes to show look the same; the winner's run over the
    user's whole band does not, a one-knob trial names the knob, and every config that moves
    it leaves the standings at once: what is exported keeps the user's micro-batch."""
    problem = ds_problem(config="ds_small.json")
    yours = problem.users_config()
    assert yours is not None
    world = LossWorld(yours, breaks=("mbs",), shows_after=12)
    study = studied(problem, world, 6, project)
    causes = read_causes(study)
    assert causes is not None and "mbs" in causes.convicted
    best = standings(study)[0]
    assert best.config.mbs == yours.mbs
    assert study_parity(study, config_key(best.config), "bf16").verdict in ("same", "yours")
