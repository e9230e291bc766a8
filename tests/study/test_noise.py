"""The between-trial spread a study starts from: saved by earlier studies of its kind only,
worth a few repeats, and left behind when the study's own repeats disagree with it."""

import random
from pathlib import Path

from autotune.calibration.saved import noise_path
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.study.verdict.confirm import contenders
from autotune.study.verdict.noise import (
    noise_kind,
    prior_note,
    read_spread,
    remember_spread,
    save_spread,
    study_spread,
)
from tests.fakes import add_measured, new_study

CLUSTER = load_cluster("dgx-h100:2")
DENSE = noise_kind("deepspeed", load_workload("llama3-8b"), None)
MOE = noise_kind("megatron", load_workload("mixtral-8x7b"), None)


def quiet_study_saved(results: Path) -> None:
    """A dense study whose repeats differ by about 1%, saved for the next of its kind."""
    rng = random.Random(3)
    study = new_study()
    for mbs in (1, 2, 4):
        first = add_measured(study, 100.0, TrainConfig(mbs=mbs))
        for _ in range(6):
            value = 100.0 * rng.lognormvariate(0.0, 0.01)
            add_measured(study, value, TrainConfig(mbs=mbs), confirms=first)
    save_spread(study, noise_path(results, CLUSTER, DENSE))


def leaders_five_percent_apart(results: Path, kind: str) -> list[int]:
    """A new study of `kind` started from what is saved, its two leaders measured once
    each, 5% apart: the configs it would repeat before naming one."""
    study = new_study()
    prior = read_spread(noise_path(results, CLUSTER, kind))
    if prior is not None:
        remember_spread(study, prior)
    add_measured(study, 105.0, TrainConfig(mbs=1))
    add_measured(study, 100.0, TrainConfig(mbs=2))
    return [s.first for s in contenders(study)]


def test_a_noise_prior_from_another_kind_of_study_does_not_tighten_a_verdict(
    tmp_path: Path,
) -> None:
    quiet_study_saved(tmp_path)
    assert DENSE != MOE
    assert leaders_five_percent_apart(tmp_path, DENSE) == []  # its own kind: settled
    assert leaders_five_percent_apart(tmp_path, MOE) == [0, 1]  # another: still unsure


def test_a_prior_the_studys_repeats_disagree_with_is_left_behind(tmp_path: Path) -> None:
    quiet_study_saved(tmp_path)
    study = new_study()
    prior = read_spread(noise_path(tmp_path, CLUSTER, DENSE))
    assert prior is not None
    remember_spread(study, prior)
    rng = random.Random(4)
    for mbs in (1, 2):
        first = add_measured(study, 100.0, TrainConfig(mbs=mbs))
        for _ in range(4):
            value = 100.0 * rng.lognormvariate(0.0, 0.15)
            add_measured(study, value, TrainConfig(mbs=mbs), confirms=first)
    spread = study_spread(study)
    assert spread is not None and spread.relative > 0.08 and spread.dof == 8
    note = prior_note(study)
    assert note is not None and "left behind" in note and "study" in note


def test_a_corrupt_noise_prior_is_one_line_naming_its_file_and_never_enters_a_study(
    tmp_path: Path,
) -> None:
    """A prior of `"relative": "x"` was copied into the study, which then failed on every run
    even after the file was deleted."""
    import pytest

    from autotune.errors import InputError

    path = noise_path(tmp_path, CLUSTER, DENSE)
    path.parent.mkdir(parents=True)
    for text in ('{"relative": "x", "dof": 3}', '{"relative": NaN, "dof": 3}', "{", "[]",
                 '{"relative": 0.1, "dof": true}', '{"relative": -0.1, "dof": 3}'):  # fmt: skip
        path.write_text(text)
        with pytest.raises(InputError, match=str(path)):
            read_spread(path)
    study = new_study()
    study.set_user_attr("noise_prior", {"relative": "x", "dof": 3})  # stored by an old version
    with pytest.raises(InputError, match="its noise_prior: relative 'x'"):
        study_spread(study)
