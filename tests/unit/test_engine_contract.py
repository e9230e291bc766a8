"""The contract every registered engine keeps, run against each of them and the toy engine
of test_toy_engine.py (a new engine gets it by being registered): its declarations are
complete, its worker module exists, its default space is planned and estimated, and it writes
its config files for a trial."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.engines import ENGINES, Engine
from autotune.estimate.predict import estimate
from autotune.problem import load_problem
from autotune.trial.spec import StepPlan
from tests.unit.test_toy_engine import TOY_SPACE, ToyEngine

CASES = {**{name: None for name in ENGINES}, "toy": TOY_SPACE}
"""Engine -> its search-space file's text (None: the engine's own file in search_spaces/)."""
CLUSTER = {"megatron": "dgx-h100:2"}  # Megatron plans for GPUs; the others run here too


@pytest.fixture(params=sorted(CASES))
def engine(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[Engine, str | None]]:
    if request.param == "toy":
        monkeypatch.setitem(ENGINES, "toy", ToyEngine())
    text = CASES[request.param]
    space = None
    if text is not None:
        path = tmp_path / "space.yaml"
        path.write_text(text)
        space = str(path)
    yield ENGINES[request.param], space


def test_every_registered_engine_is_in_this_suite() -> None:
    assert set(ENGINES) <= set(CASES)


def test_its_declarations_are_complete(engine: tuple[Engine, str | None]) -> None:
    e, _ = engine
    assert e.name and e.knobs and e.traits.script_hint
    assert importlib.util.find_spec(e.worker_module) is not None, e.worker_module
    assert all(rule.reason and "\n" not in rule.reason for rule in e.rules)


def test_its_space_is_planned_estimated_and_written(
    engine: tuple[Engine, str | None], tmp_path: Path
) -> None:
    e, space = engine
    problem = load_problem(e.name, "tiny", CLUSTER.get(e.name, "local:2"), space)
    valid = problem.enumerate().require_some().valid
    assert set(problem.space.values) <= set(e.knobs)
    first = estimate(problem.workload, valid[0], problem.cluster, e.traits)
    assert first.step.total_s > 0 and first.memory.total > 0 and first.tokens_per_s > 0
    files = e.write_files(problem.trial_spec(valid[0], StepPlan()), tmp_path)
    assert files and all(f.exists() and f.stat().st_size > 0 for f in files)
