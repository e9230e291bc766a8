"""DeepSpeed's offload in the model: device memory freed, host memory filled and checked,
the host link and the CPU's optimizer step paid every step."""

import dataclasses

import pytest

from autotune.engines import get_engine
from autotune.estimate.model_states import rank_parameters
from autotune.estimate.predict import estimate
from autotune.estimate.ranking import memory_reason
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload

LLAMA8 = load_workload("llama3-8b")  # bf16
H100 = load_cluster("dgx-h100:1")  # 8 GPUs, PCIe Gen5 64 GB/s, 77 GB/s of host DRAM each


def test_offloading_the_optimizer_by_hand() -> None:
    flat = estimate(LLAMA8, TrainConfig(dp=8, zero=2), H100, get_engine("deepspeed").traits)
    off = estimate(
        LLAMA8,
        TrainConfig(dp=8, zero=2, offload_optimizer=True),
        H100,
        get_engine("deepspeed").traits,
    )
    part = rank_parameters(LLAMA8, 1, 1) / 8  # the rank's ZeRO partition
    # Adam's 12 bytes and the fp32 gradient partition's 4 move to the host, which also holds
    # a bf16 buffer for the 16 micro-batches' gradients.
    assert off.memory.optimizer == 0 and off.memory.offloaded == pytest.approx(18 * part)
    assert flat.memory.total - off.memory.total == pytest.approx(16 * part)
    # bf16 gradients down each micro-batch (and up again to accumulate after the first),
    # parameters up once, then CPU Adam over the host's memory.
    moves = 2 * 16 - 1 + 1
    assert off.step.offload_s == pytest.approx(part * moves * 2 / 64e9 + part * 30 / 77e9)
    assert off.step.optimizer_s == 0 and flat.step.offload_s == 0


def test_a_host_too_small_for_what_is_offloaded_does_not_fit() -> None:
    small = dataclasses.replace(
        H100, device=dataclasses.replace(H100.device, host_memory_bytes=2**30)
    )
    config = TrainConfig(dp=8, zero=3, offload_optimizer=True, offload_param=True)
    e = estimate(LLAMA8, config, small, get_engine("deepspeed").traits)
    assert not e.fits
    assert "of host memory per device" in memory_reason(e, small.device)
    assert estimate(LLAMA8, config, H100, get_engine("deepspeed").traits).fits
