"""Warm pools, for every engine that runs in one: trials after the first skip launch and
imports, a trial measures the same whatever ran before it in the pool, and a trial that
crashes is typed while the next one runs in a fresh pool."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from autotune.engines import ENGINES
from autotune.launchers import LaunchOutcome, get_launcher
from autotune.launchers.base import Launcher
from autotune.problem import Problem, load_problem
from autotune.runner import prepare
from autotune.space import TrainConfig
from autotune.trial.result import TrialResult
from autotune.trial.spec import FAULT_ENV, PoolKind, StepPlan, TrialSpec
from tests.engines.test_users_commands import ds_train_problem

pytestmark = pytest.mark.slow
WARM_ENGINES = sorted(name for name, engine in ENGINES.items() if engine.warm_pool)


def launch_and_imports(r: TrialResult) -> float:
    return r.phases_s["started"] + r.phases_s["imported"]


ALL_RANKS_LOCAL = ("LOCAL_SIZE", "2")
"""As DeepSpeed's own launcher sets it: DeepSpeed's CPU allreduce then runs through buffers
in shared memory, one per rank."""


def deepspeed_buffers() -> set[Path]:
    """DeepSpeed's CPU allreduce buffers in /dev/shm now (`rank.shared_buffers`)."""
    return set(Path("/dev/shm").glob("deepspeed_allreduce_buffer_*"))


def first_other_again_crash_fresh(
    problem: Problem,
    launcher: Launcher,
    folder: Path,
    first: TrialSpec,
    other: TrialSpec,
    pool: PoolKind,
) -> tuple[TrialResult, TrialResult, TrialResult, TrialResult]:
    """`first`, `other`, `first` again, `first` with an injected crash (typed, with its
    cause), then `first` in the fresh pool the crash leaves: the four results that ran.
    None of their worlds leaves a DeepSpeed allreduce buffer in /dev/shm (memory)."""
    before = deepspeed_buffers()

    def trial(n: int, spec: TrialSpec, env: dict[str, str] | None = None) -> LaunchOutcome:
        request = prepare(spec, problem.engine, launcher, folder / f"t{n}", time_limit_s=300)
        assert request.pool == pool
        return launcher.run(dataclasses.replace(request, env={**request.env, **(env or {})}))

    with launcher:
        outcomes = [
            trial(0, first),
            trial(1, other),
            trial(2, first),
            trial(3, first, {FAULT_ENV: "crash"}),
            trial(4, first),
        ]
    assert deepspeed_buffers() <= before
    kinds = [o.kind for o in outcomes]
    assert kinds == ["ok", "ok", "ok", "crash", "ok"], [(o.kind, o.error) for o in outcomes]
    assert "injected crash" in (outcomes[3].error or "")
    a, b, c, _, d = (o.result for o in outcomes)
    assert a and b and c and d
    return a, b, c, d


@pytest.mark.parametrize("engine", WARM_ENGINES)
def test_pooled_trials_are_independent_and_a_crash_starts_a_fresh_pool(
    tmp_path: Path, engine: str
) -> None:
    launcher = get_launcher("local")
    problem = load_problem(engine, "tiny", "local:2")
    tiny = problem.workload
    # 50x the tiny model's states: its peak memory would show in the next trial's if the
    # pool carried it over.
    wide = dataclasses.replace(
        tiny,
        name="wide",
        hidden_size=512,
        ffn_hidden_size=2048,
        num_attention_heads=8,
        num_query_groups=8,
    )
    config = TrainConfig(dp=2, zero=0, mbs=2)
    specs = [
        dataclasses.replace(problem.trial_spec(config, StepPlan()), workload=w)
        for w in (tiny, wide)
    ]
    first, wide_run, after, fresh = first_other_again_crash_fresh(
        problem, launcher, tmp_path, specs[0], specs[1], pool="warm"
    )

    # Warm: the pool's first trial paid launch and imports (seconds), the next ones did not;
    # the trial after the crash ran in a fresh pool that paid them again. Sent at once, a
    # trial does not wait for a thorough collection after the last one (0.3 s here).
    assert launch_and_imports(wide_run) < 0.2 and launch_and_imports(first) > 0.5
    assert launch_and_imports(after) < 0.2 and launch_and_imports(fresh) > 0.5
    # Independent: the same config measures the same after a much larger one.
    assert after.model_state_bytes == first.model_state_bytes
    assert first.peak_memory_bytes and after.peak_memory_bytes and wide_run.peak_memory_bytes
    grown = after.peak_memory_bytes - first.peak_memory_bytes
    assert grown < 0.25 * (wide_run.peak_memory_bytes - first.peak_memory_bytes)
    # Each trial's fastest step: what the config costs when no other process interferes.
    # Even so, the same 35 ms step measured 0.89-1.39x apart in two fresh pools on this
    # shared machine, and the trial after the wide one 0.90-1.82x the first (torch, eight
    # runs): compared with the nearer of the two clean runs, a pool that carried the wide
    # trial's work or memory over would be several times slower, noise is not.
    assert first.step_time_min_s and after.step_time_min_s and fresh.step_time_min_s
    clean = (first.step_time_min_s, fresh.step_time_min_s)
    nearest = min(clean, key=lambda s: abs(math.log(after.step_time_min_s / s)))
    assert 1 / 2 < after.step_time_min_s / nearest < 2


def test_a_users_script_runs_forked_each_trial_a_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's own DeepSpeed script in a forked pool: after the pool's first trial no
    trial pays launch or imports, each runs the script from its first line in a process of
    its own (DeepSpeed's communication set up again), and a crash is typed while the next
    trial runs in a fresh pool."""
    problem = ds_train_problem(tmp_path, monkeypatch)
    monkeypatch.setenv(*ALL_RANKS_LOCAL)
    launcher = get_launcher("local")
    plain, other = TrainConfig(dp=2, zero=0, mbs=4), TrainConfig(dp=2, zero=1, mbs=8)
    specs = [problem.trial_spec(config, StepPlan()) for config in (plain, other)]
    first, zero1, again, fresh = first_other_again_crash_fresh(
        problem, launcher, tmp_path, specs[0], specs[1], pool="forked"
    )
    assert launch_and_imports(first) > 0.5 and launch_and_imports(fresh) > 0.5
    assert launch_and_imports(zero1) < 0.2 and launch_and_imports(again) < 0.2
    assert zero1.model_state_bytes < first.model_state_bytes  # ZeRO 1 ran as asked
    assert again.model_state_bytes == first.model_state_bytes
    for n in (0, 1, 2, 4):  # init_distributed set up DeepSpeed's collectives in each trial
        log = (tmp_path / f"t{n}" / "log.txt").read_text()
        assert "deepspeed_shm_comm_op built successfully" in log


@pytest.mark.parametrize("engine", WARM_ENGINES)
def test_a_pool_leaves_no_trials_groups_or_torch_patches(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Across a pool's life its ranks hold the world group alone between trials: each
    trial's own groups are destroyed after it (they once added up, 5, 9, then 13 live
    groups after three trials). What a trial patched in torch is put back: after a ZeRO-3
    trial, DeepSpeed's own linear once ran in every later trial of the pool, which then read
    up to a fifth slower than a fresh launch of its config."""
    monkeypatch.setenv(*ALL_RANKS_LOCAL)
    launcher = get_launcher("local")
    problem = load_problem(engine, "tiny", "local:2")
    zeros = (3, 1, 3) if engine == "deepspeed" else (0, 0, 0)
    before = deepspeed_buffers()
    with launcher:
        for n, zero in enumerate(zeros):
            spec = problem.trial_spec(TrainConfig(dp=2, zero=zero, mbs=2), StepPlan())
            request = prepare(spec, problem.engine, launcher, tmp_path / f"t{n}", 300)
            assert request.pool == "warm"
            assert launcher.run(request).kind == "ok"
    # Searched anywhere in a line: the ranks append to one log, and another rank's
    # unfinished line (a buffer flushed mid-line) can run into the start of this one.
    logs = [(tmp_path / f"t{n}" / "log.txt").read_text() for n in range(3)]
    counts = [sorted(re.findall(POOL_LINE, log)) for log in logs]
    assert counts == [[("0", "1"), ("1", "1")]] * 3, counts
    assert deepspeed_buffers() <= before
    put_back = [sorted(re.findall(PUT_BACK_LINE, log)) for log in logs]
    linear = "torch.nn.functional.linear" if engine == "deepspeed" else "nothing"
    # ZeRO 1 between two ZeRO-3 trials: it ran torch's linear, and the last trial DeepSpeed's
    # again, as a fresh launch of each does.
    assert put_back == [
        [("0", linear), ("1", linear)],
        [("0", "nothing"), ("1", "nothing")],
        [("0", linear), ("1", linear)],
    ], put_back


POOL_LINE = r"autotune pool: rank (\d+) holds (\d+) process group\(s\) after the trial"
PUT_BACK_LINE = r"autotune pool: rank (\d+) put back (.+?) in torch"
