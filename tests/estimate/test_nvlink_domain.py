"""Groups are placed by NVLink domain, not by node: on an NVL72 rack a group of trays talks
over NVLink, where the same trays as separate nodes would cross the network."""

import dataclasses
from pathlib import Path

from autotune.engines import get_engine
from autotune.estimate.predict import estimate
from autotune.problem import load_problem
from autotune.space.config import TrainConfig
from autotune.specs import load_cluster, load_workload


def test_a_data_parallel_group_across_trays_stays_on_nvlink_in_one_rack() -> None:
    rack = load_cluster("gb200-nvl72:1")
    trays = dataclasses.replace(rack, nvlink_domain=None)  # the same 18 trays of 4, no NVL72
    w = load_workload("llama3-8b")
    config = TrainConfig(tp=4, dp=18, zero=1, mbs=1)
    on_nvlink = estimate(w, config, rack, get_engine("megatron").traits).step
    on_network = estimate(w, config, trays, get_engine("megatron").traits).step
    assert on_nvlink.dp_comm_s < on_network.dp_comm_s / 3
    assert on_nvlink.compute_s == on_network.compute_s


def test_tensor_parallel_spans_trays_inside_a_rack_but_not_separate_nodes(
    tmp_path: Path,
) -> None:
    rack = load_problem("megatron", "llama3-70b", "gb200-nvl72:1")
    assert rack.space.values["tp"] == (1, 2, 4, 8)  # a tray holds 4; the rack's NVLink 72
    assert any(c.tp == 8 for c in rack.enumerate().valid)
    trays = tmp_path / "trays.yaml"
    trays.write_text(
        "nodes: 18\ndevices_per_node: 4\ndevice: gb200\n"
        "intra_link: {bandwidth_gbps: 721.8, latency_us: 1}\n"
        "inter_link: {bandwidth_gbps: 50, latency_us: 5}\n"
    )
    separate = load_problem("megatron", "llama3-70b", str(trays))
    assert separate.space.values["tp"] == (1, 2, 4)
    assert not any(c.tp == 8 for c in separate.enumerate().valid)
