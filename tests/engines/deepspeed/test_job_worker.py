"""The rank side of a user's DeepSpeed script: the trial fails as config_ignored when the
engine DeepSpeed built holds other settings than the trial's ds_config (a fake engine here:
no torch process)."""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("deepspeed")

from autotune.engines.deepspeed import job_worker  # noqa: E402
from autotune.rank import failures  # noqa: E402
from autotune.space import TrainConfig  # noqa: E402
from autotune.specs import load_cluster, load_workload  # noqa: E402
from autotune.trial.spec import TrialSpec  # noqa: E402


class Device(StrEnum):
    """deepspeed/runtime/zero/offload_config.py `OffloadDeviceEnum`."""

    none = "none"
    cpu = "cpu"
    nvme = "nvme"


class FakeEngine:
    """The accessors of `DeepSpeedEngine` (runtime/engine.py) that the check reads."""

    def __init__(self, **settings: Any) -> None:
        held = {
            "mbs": 2,
            "stage": 2,
            "train_batch_size": 32,
            "accum": 4,
            "reduce_bucket_size": 500_000_000,
            "allgather_bucket_size": 500_000_000,
            "overlap_comm": False,
            "offload_optimizer": None,
            "offload_param": None,
        } | settings
        self.held = held
        self._config = SimpleNamespace(
            zero_config=SimpleNamespace(
                **{k: held[k] for k in held if k.endswith(("_size", "comm")) or "offload" in k}
            )
        )

    def train_micro_batch_size_per_gpu(self) -> int:
        return int(self.held["mbs"])

    def zero_optimization_stage(self) -> int:
        return int(self.held["stage"])

    def train_batch_size(self) -> int:
        return int(self.held["train_batch_size"])

    def gradient_accumulation_steps(self) -> int:
        return int(self.held["accum"])


SPEC = TrialSpec(
    engine="deepspeed",
    workload=dataclasses.replace(load_workload("tiny"), global_batch_size=32),
    cluster=load_cluster("local:4"),
    config=TrainConfig(dp=4, zero=2, mbs=2),
)


def test_an_engine_that_runs_the_trials_config_passes() -> None:
    running = job_worker.running_config(FakeEngine())
    assert job_worker.ignored_knob(running, SPEC) is None
    job_worker.check_config(FakeEngine(), SPEC)  # type: ignore[arg-type]
    offloaded = dataclasses.replace(
        SPEC, config=dataclasses.replace(SPEC.config, offload_optimizer=True)
    )
    cpu = SimpleNamespace(device=Device.cpu)
    assert (
        job_worker.ignored_knob(
            job_worker.running_config(FakeEngine(offload_optimizer=cpu)), offloaded
        )
        is None
    )
    nvme = SimpleNamespace(device=Device.nvme)  # the user's NVMe section: no CPU offload
    assert (
        job_worker.ignored_knob(
            job_worker.running_config(FakeEngine(offload_optimizer=nvme)), SPEC
        )
        is None
    )


@pytest.mark.parametrize(
    ("held", "named"),
    [
        ({"train_batch_size": 64, "accum": 8}, "train_batch_size=64"),
        ({"accum": 8}, "gradient_accumulation_steps=8"),
        ({"reduce_bucket_size": 200_000_000}, "reduce_bucket=200000000"),
        ({"allgather_bucket_size": 200_000_000}, "allgather_bucket=200000000"),
        ({"overlap_comm": True}, "overlap_comm=True"),
        ({"offload_optimizer": SimpleNamespace(device=Device.cpu)}, "offload_optimizer=True"),
        ({"stage": 3}, "zero=3"),
    ],
)
def test_a_setting_the_script_overrides_fails_the_trial_naming_it(
    held: dict[str, Any], named: str
) -> None:
    with pytest.raises(failures.ConfigIgnoredError, match=named) as raised:
        job_worker.check_config(FakeEngine(**held), SPEC)  # type: ignore[arg-type]
    knob = named.partition("=")[0]
    wanted = job_worker.trials_config(SPEC)[knob]
    assert f"sets {knob}={wanted}" in str(raised.value)


def test_a_pipeline_that_takes_data_parallel_ranks_names_the_batch() -> None:
    """DeepSpeed divides train_batch_size over world / pp ranks: twice the accumulation."""
    running = job_worker.running_config(FakeEngine(accum=8))
    line = job_worker.ignored_knob(running, SPEC)
    assert line is not None and "train_batch_size=32 over 4 data-parallel ranks" in line


def test_a_first_batch_of_another_size_than_the_micro_batch_is_config_ignored() -> None:
    """A DataLoader that batches by its own number: the engine holds the trial's micro-batch,
    the tokens it is given do not (batch-first or sequence-first shapes both pass)."""
    job_worker.check_config(FakeEngine(), SPEC, (2, 128))  # type: ignore[arg-type]
    job_worker.check_config(FakeEngine(), SPEC, (128, 2))  # type: ignore[arg-type]
    with pytest.raises(failures.ConfigIgnoredError, match=r"shape \[8, 128\].*micro-batch of 2"):
        job_worker.check_config(FakeEngine(), SPEC, (8, 128))  # type: ignore[arg-type]
