"""Which trials share a pool: NCCL reads its variables once per process, so a trial with
other NCCL settings must not run in a pool started with different ones; and which trials run
in which kind of pool."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from autotune.engines import get_engine
from autotune.engines.command import parse_job
from autotune.launchers import LaunchRequest, get_launcher
from autotune.launchers.warm_pool import pool_key
from autotune.problem import load_problem
from autotune.runner import prepare
from autotune.space import TrainConfig
from autotune.trial.spec import FAULT_ENV, PoolKind, StepPlan


def request(
    env: dict[str, str], worker: str = "autotune.engines.torch.worker", pool: PoolKind = "warm"
) -> LaunchRequest:
    return LaunchRequest(
        folder=Path("t"), worker_module=worker, nprocs_per_node=2, env=env, pool=pool
    )


def test_other_nccl_settings_need_a_pool_of_their_own() -> None:
    default = request({"DS_ACCELERATOR": "cpu"})
    ring = request({"DS_ACCELERATOR": "cpu", "NCCL_ALGO": "Ring"})
    assert pool_key(default) != pool_key(ring)
    assert pool_key(ring) == pool_key(request({"NCCL_ALGO": "Ring", "DS_ACCELERATOR": "cpu"}))


def test_an_injected_fault_is_the_trials_own_and_shares_the_pool() -> None:
    assert pool_key(request({FAULT_ENV: "crash"})) == pool_key(request({}))


def test_another_engine_or_world_needs_another_pool() -> None:
    assert pool_key(request({})) != pool_key(request({}, "autotune.engines.deepspeed.worker"))


def test_a_forked_pool_never_serves_a_warm_pools_trial() -> None:
    worker = "autotune.engines.deepspeed.job_worker"
    assert pool_key(request({}, worker, "forked")) != pool_key(request({}, worker, "warm"))


def test_built_in_engines_run_warm_and_a_users_command_forked_on_gloo(tmp_path: Path) -> None:
    launcher = get_launcher("local")
    problem = load_problem("deepspeed", "tiny", "local:2")
    spec = problem.trial_spec(TrainConfig(dp=2, zero=1, mbs=4), StepPlan())
    assert prepare(spec, problem.engine, launcher, tmp_path / "own", 60).pool == "warm"
    (tmp_path / "train.py").write_text("")
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 16}))
    job = parse_job(["train.py", "--deepspeed_config", "ds.json"], tmp_path, "deepspeed")
    users = dataclasses.replace(spec, job=job)
    assert prepare(users, problem.engine, launcher, tmp_path / "users", 60).pool == "forked"
    for framework in ("megatron", "torchtitan"):  # their trials need CUDA: launched afresh
        logged = dataclasses.replace(users, job=dataclasses.replace(job, framework=framework))
        assert prepare(logged, problem.engine, launcher, tmp_path / framework, 60).pool is None
    # A fork is safe only before a device context exists: GPU trials launch afresh.
    gpus = load_problem("deepspeed", "tiny", "dgx-h100:1").cluster
    on_gpus = dataclasses.replace(users, cluster=gpus)
    assert prepare(on_gpus, problem.engine, launcher, tmp_path / "gpus", 60).pool is None
    assert not get_engine("megatron").warm_pool  # its parallel state is global; not shown safe
    # A DeepSpeed pipeline leaves its grid in deepspeed.utils.groups for the next engine.
    pipelined = problem.trial_spec(TrainConfig(pp=2, dp=1, zero=0, mbs=4), StepPlan())
    assert prepare(pipelined, problem.engine, launcher, tmp_path / "pipe", 60).pool is None
