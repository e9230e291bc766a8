"""A new engine is its declarations in engines/ plus a search-space file: registered in a
test, a toy engine is planned, tuned (simulated) and exported with no change elsewhere, and
the estimator and train.sh read its traits, not its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.engines import ENGINES, Engine, get_engine
from autotune.engines.base import NCCL_KNOBS, NCCL_MEANINGS
from autotune.estimate import model_states
from autotune.estimate.traits import EngineTraits
from autotune.problem import load_problem
from autotune.space import Rule, TrainConfig
from autotune.space.table import ConfigTable
from autotune.study import Budget
from autotune.trial.spec import TrialSpec
from autotune.tune import TuneSettings, tune
from tests.fakes import Quiet

TOY_SPACE = "engine: toy\nknobs:\n  zero: [0, 1, 2, 3]\n  mbs: [1, 2, 4]\n"


class ToyEngine(Engine):
    name = "toy"
    worker_module = "autotune.engines.torch.worker"
    knobs = frozenset({"zero", "mbs", "recompute"}) | NCCL_KNOBS
    knob_meanings = {
        "zero": "how many of the model states the toy shards: 0-2",
        "mbs": "samples per rank per micro-batch",
        "recompute": "activation recomputation: none or full",
        **NCCL_MEANINGS,
    }
    engine_rules = (Rule("toy_zero", "the toy shards up to zero 2", lambda c, _w, _k: c.zero < 3),)
    traits = EngineTraits(
        fp32_master="always",
        bucket_unit="megabytes",
        overlap="always",
        script_hint="read toy.json in your script",
    )

    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        path = folder / "toy.json"
        path.write_text(json.dumps(spec.config.as_dict(), sort_keys=True) + "\n")
        return [path]


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setitem(ENGINES, "toy", ToyEngine())
    space = tmp_path / "toy.yaml"
    space.write_text(TOY_SPACE)
    return space


def test_a_toy_engine_is_planned_tuned_and_exported(toy: Path, tmp_path: Path) -> None:
    problem = load_problem("toy", "tiny", "local:2", str(toy))
    assert {c.zero for c in problem.enumerate().valid} == {0, 1, 2}  # its own rule applies
    tuned = tune(
        problem,
        TuneSettings(budget=Budget(trials=3), launcher="simulate", results=tmp_path / "r"),
        Quiet(),
    )
    names = {p.name for p in tuned.exported}
    assert {"toy.json", "train.sh", "nccl.env"} <= names
    train = (tuned.ref.folder / "best" / "train.sh").read_text()
    assert "read toy.json in your script" in train and "autotune.engines.torch.worker" in train


def test_the_estimator_reads_the_toy_engines_traits(toy: Path) -> None:
    """fp32_master="always" keeps the fp32 copy even for an fp32 model: 4 more bytes per
    parameter in the optimizer than PyTorch's, whose master copy is for mixed precision."""
    workload = load_problem("toy", "tiny", "local:2", str(toy)).workload
    config = TrainConfig(dp=2)
    toy_states = model_states(workload, ConfigTable.of([config]), get_engine("toy").traits)
    torch_states = model_states(workload, ConfigTable.of([config]), get_engine("torch").traits)
    assert toy_states.optimizer - torch_states.optimizer == pytest.approx(
        4 * workload.num_parameters
    )
