"""A trial in a pool measures what a fresh launch of the same config measures, as production
will launch the export: pooled and fresh launches of several configs, interleaved in pairs so
that a slow moment of the machine falls on both, differ by no more than launches of one
config differ from each other (issue 39: pooled trials once read up to 19% slow; later, every
trial after a ZeRO-3 one in a warm pool ran DeepSpeed's own linear, until the pool's ranks put
back what a trial patched in torch, `rank/torch_patches.py`)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

import pytest

from autotune.launchers import get_launcher
from autotune.launchers.base import Launcher
from autotune.problem import Problem, load_problem
from autotune.runner import prepare
from autotune.space import parse_overrides
from autotune.trial.spec import StepPlan
from tests.engines.test_users_commands import ds_train_problem

pytestmark = pytest.mark.slow


def tokens_per_s(
    problem: Problem, launcher: Launcher, config: str, folder: Path, pooled: bool
) -> float:
    spec = problem.trial_spec(problem.config(parse_overrides(config)), StepPlan())
    request = prepare(spec, problem.engine, launcher, folder, time_limit_s=300)
    assert request.pool == ("forked" if problem.job else "warm")
    outcome = launcher.run(request if pooled else dataclasses.replace(request, pool=None))
    assert outcome.kind == "ok" and outcome.result is not None, (outcome.kind, outcome.error)
    return outcome.result.tokens_per_s


def paired_log_ratios(
    problem: Problem, configs: list[str], folder: Path, rounds: int
) -> list[float]:
    """log(pooled / fresh) of each config in each round, the pair's order alternating."""
    ratios = []
    with get_launcher("local") as pool, get_launcher("local") as fresh:
        tokens_per_s(problem, pool, configs[0], folder / "opening", pooled=True)  # pays imports
        for n in range(rounds):
            for config in configs:
                pair = {}
                for pooled in (True, False) if n % 2 == 0 else (False, True):
                    launcher = pool if pooled else fresh
                    where = folder / f"{config}-{n}-{'pooled' if pooled else 'fresh'}"
                    pair[pooled] = tokens_per_s(problem, launcher, config, where, pooled)
                ratios.append(math.log(pair[True] / pair[False]))
    return ratios


def within_launch_spread(ratios: list[float], floor: float) -> bool:
    """Whether the median pooled/fresh ratio is 1 within what the pairs' own spread allows
    (about 99.9%, from their median absolute deviation: one launch landing 50% off on a busy
    machine moves neither), never tighter than `floor`, and never as far off as the 19% the
    issue found: a pool that reads configs that slow or fast fails."""
    median = statistics.median(ratios)
    spread = 1.4826 * statistics.median(abs(r - median) for r in ratios)
    allowed = 3.3 * 1.25 * spread / math.sqrt(len(ratios))  # the median's standard error
    return abs(median) <= min(max(allowed, floor), 0.18)


def assert_pooled_reads_fresh(
    problem: Problem, configs: list[str], folder: Path, rounds: int, floor: float
) -> None:
    """Pairs of `rounds`; where their spread leaves the median unsettled (launches on a busy
    host once landed 2.6x apart, and 8 pairs put the median 21% off), as many again, and the
    median of all of them judged: a pool that reads configs 19% off fails either way."""
    ratios = paired_log_ratios(problem, configs, folder / "first", rounds)
    if not within_launch_spread(ratios, floor):
        ratios += paired_log_ratios(problem, configs, folder / "again", rounds)
    assert within_launch_spread(ratios, floor), (math.exp(statistics.median(ratios)), ratios)


def test_the_warm_pool_measures_what_a_fresh_launch_does(tmp_path: Path) -> None:
    problem = load_problem("deepspeed", "tiny", "local:2")
    configs = ["zero=0,mbs=8", "zero=3,mbs=4"]
    assert_pooled_reads_fresh(problem, configs, tmp_path, rounds=3, floor=0.03)


def test_a_forked_trial_of_a_users_script_measures_what_a_fresh_launch_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = ds_train_problem(tmp_path, monkeypatch)
    configs = ["zero=0,mbs=4", "zero=2,mbs=8"]
    # Never tighter than 12%: a user's script's pairs cluster by chance (-9% in four of six
    # once on a quiet host, +0.4% in the median of fourteen after).
    assert_pooled_reads_fresh(problem, configs, tmp_path / "trials", rounds=4, floor=0.12)
