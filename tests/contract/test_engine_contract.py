"""The contract every registered engine keeps, run against each of them and the toy engine
of test_toy_engine.py (a new engine gets it by being registered): its declarations are
complete, its worker is a module torchrun can start, each knob has a meaning, its rules
remove configs and refuse one given that breaks them, its default space is planned and
estimated, and the config files it writes for a trial parse and follow the config."""

from __future__ import annotations

import ast
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.engines import ENGINES, Engine
from autotune.errors import InputError
from autotune.estimate.predict import estimate
from autotune.problem import Problem, load_problem
from autotune.space import Rule
from autotune.space.enumerate import build_config
from autotune.space.rules import first_violation
from autotune.trial.spec import StepPlan
from tests.engines.test_toy_engine import TOY_SPACE, ToyEngine

CASES = {**{name: None for name in ENGINES}, "toy": TOY_SPACE}
"""Engine -> its search-space file's text (None: the engine's own, autotune/search_spaces/)."""
CLUSTER = {"megatron": "dgx-h100:2", "torch": "local:4"}
"""Megatron plans for GPUs; the others run here too (torch on 4 ranks, where tp and pp meet)."""


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
    assert all(rule.reason and "\n" not in rule.reason for rule in e.rules)


def test_its_worker_is_a_module_the_rank_entry_can_start(
    engine: tuple[Engine, str | None],
) -> None:
    """`python -m autotune.rank <worker_module>` on every rank: a Python file on disk with the
    `main(args, started)` the entry calls, and the `SESSION` a warm pool builds where the
    engine runs in one."""
    e, _ = engine
    spec = importlib.util.find_spec(e.worker_module)
    assert spec is not None and spec.origin is not None, e.worker_module
    source = Path(spec.origin)
    assert source.suffix == ".py" and source.is_file(), source
    tree = ast.parse(source.read_text(), str(source))
    mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    assert mains, f"{source}: no main(args, started) for autotune.rank to call"
    assert [a.arg for a in mains[0].args.args] == ["args", "started"], source
    names = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name)}  # fmt: skip
    assert "SESSION" in names or not e.warm_pool, f"{source}: a warm pool needs SESSION"


def test_every_knob_it_reads_has_a_meaning_in_its_own_words(
    engine: tuple[Engine, str | None],
) -> None:
    """`autotune space` and the plan show each knob's meaning for this engine."""
    e, _ = engine
    assert set(e.knob_meanings) == set(e.knobs)
    assert all(m.strip() and "\n" not in m for m in e.knob_meanings.values())


def test_its_rules_remove_configs_and_reject_one_given_that_breaks_them(
    engine: tuple[Engine, str | None],
) -> None:
    """Its default space, enumerated, holds only configs that keep every rule; its own rules
    remove some; and a config given with `--config` that breaks one of its own rules (one
    knob away from a valid config) is refused, naming the rule."""
    e, space = engine
    problem = load_problem(e.name, "tiny", CLUSTER.get(e.name, "local:2"), space)
    found = problem.enumerate()
    w, k = problem.workload, problem.cluster
    assert all(r.ok(c, w, k) for c in found.valid[:500] for r in e.rules)
    assert sum(found.removed.get(r.name, 0) for r in e.engine_rules) > 0, found.removed
    overrides, rule = breaking_one_of_its_rules(problem, e)
    with pytest.raises(InputError, match=f"breaks rule {rule.name}"):
        problem.config(overrides)


def test_its_space_is_planned_estimated_and_written(
    engine: tuple[Engine, str | None], tmp_path: Path
) -> None:
    """Its first valid config is estimated, and its config files for a trial parse as what
    their names say and differ from another config's."""
    e, space = engine
    problem = load_problem(e.name, "tiny", CLUSTER.get(e.name, "local:2"), space)
    valid = problem.enumerate().require_some().valid
    first = estimate(problem.workload, valid[0], problem.cluster, e.traits)
    assert first.step.total_s > 0 and first.memory.total > 0 and first.tokens_per_s > 0
    written = []
    for i, config in enumerate((valid[0], valid[-1])):
        folder = tmp_path / str(i)
        folder.mkdir()
        files = e.write_files(problem.trial_spec(config, StepPlan()), folder)
        assert files and all(f.parent == folder for f in files)
        for f in files:
            parse(f)
        written.append({f.name: f.read_text() for f in files})
    assert written[0].keys() == written[1].keys() and written[0] != written[1]


def parse(path: Path) -> None:
    """Parse a config file as its suffix says, or fail for a suffix this suite does not
    know (add its parser here)."""
    text = path.read_text()
    if path.suffix == ".json":
        assert isinstance(json.loads(text), dict), path
    elif path.suffix in (".yaml", ".yml"):
        assert isinstance(yaml.safe_load(text), dict), path
    elif path.suffix == ".py":
        ast.parse(text, str(path))
    elif path.suffix == ".txt":  # command-line flags, one or a flag and its value a line
        lines = [line for line in text.splitlines() if line.strip() and line[0] != "#"]
        assert lines and all(line.startswith("--") for line in lines), path
    else:
        raise AssertionError(f"{path.name}: no parser for {path.suffix!r} in this suite")


def breaking_one_of_its_rules(problem: Problem, e: Engine) -> tuple[dict[str, Any], Rule]:
    """`--config` overrides one knob of the space away from a valid config, which break one
    of the engine's own rules and no rule before it; and that rule."""
    w, k, given = problem.workload, problem.cluster, e.knobs | {"tp", "pp"}
    for c in problem.enumerate().valid:
        for knob, values in problem.space.values.items():
            for value in values:
                overrides = {n: v for n, v in c.as_dict().items() if n in given} | {knob: value}
                rule = first_violation(build_config(overrides, k.world_size), w, k, problem.rules)
                if rule is not None and rule in e.engine_rules:
                    return overrides, rule
    raise AssertionError(f"no config one knob from a valid one breaks a rule of {e.name}")
