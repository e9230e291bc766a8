from pathlib import Path

import pytest

from autotune.errors import InputError
from autotune.specs import load_cluster, load_workload
from autotune.specs.presets import WORKLOADS


@pytest.mark.parametrize("name", ["tiny", "gpt-1.3b", "llama3-8b", "llama3-70b", "gpt3-175b"])
def test_workload_presets_are_consistent(name: str) -> None:
    w = load_workload(name)
    assert w.hidden_size % w.num_attention_heads == 0
    assert w.num_attention_heads % w.num_query_groups == 0


def test_llama3_8b_has_eight_billion_parameters() -> None:
    assert 7.9e9 < load_workload("llama3-8b").num_parameters < 8.2e9
    assert 70e9 < load_workload("llama3-70b").num_parameters < 71.5e9


def test_model_flops_follow_megatron_formula_by_hand() -> None:
    w = WORKLOADS["gpt3-175b"]
    b, s, layers, h, v = 1536, 2048, 96, 12288, 51200
    by_hand = 72 * b * s * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))
    assert w.model_flops_per_step() == pytest.approx(by_hand, rel=1e-12)


def test_cluster_presets_take_a_node_count() -> None:
    c = load_cluster("dgx-h100:16")
    assert (c.nodes, c.devices_per_node, c.world_size, c.backend) == (16, 8, 128, "nccl")
    assert c.device.peak_flops["bf16"] == 989e12
    assert load_cluster("dgx-a100:1").nodes == 1
    with pytest.raises(InputError, match="give its node count, e.g. dgx-a100:1"):
        load_cluster("dgx-a100")  # one node is seldom what was meant


def test_local_cluster_uses_this_hosts_cores_with_gloo() -> None:
    c = load_cluster("local:3")
    assert (c.devices_per_node, c.backend, c.nodes) == (3, "gloo", 1)
    assert c.device.peak_flops["fp32"] > 0


def test_local_nodes_share_this_host_among_all_their_processes() -> None:
    c = load_cluster("local:2x3")
    assert (c.name, c.nodes, c.devices_per_node, c.backend) == ("local:2x3", 2, 3, "gloo")
    assert c.device.memory_bytes == load_cluster("local:6").device.memory_bytes


def test_workload_file_uses_megatron_names(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        "num_layers: 2\nhidden_size: 128\nnum_attention_heads: 8\n"
        "vocab_size: 1000\nseq_length: 32\nglobal_batch_size: 8\nswiglu: true\n"
    )
    w = load_workload(str(path))
    assert (w.name, w.num_query_groups, w.ffn_hidden_size, w.swiglu) == ("mine", 8, 512, True)


def test_cluster_file_with_own_device(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(
        "nodes: 2\ndevices_per_node: 4\nbackend: nccl\n"
        "device: {name: l40s, memory_gib: 48, peak_tflops: {bf16: 362}}\n"
        "intra_link: {bandwidth_gbps: 32, latency_us: 2}\n"
        "inter_link: {bandwidth_gbps: 25, latency_us: 5}\n"
    )
    c = load_cluster(str(path))
    assert c.world_size == 8 and c.device.memory_bytes == 48 * 2**30
    assert c.inter_link.bandwidth_bytes_per_s == 25e9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("num_layers: [1\n", "malformed YAML"),
        ("- a\n- b\n", "expected a mapping"),
        (
            "num_layers: 2\nhidden_size: 128\nnum_attention_heads: 8\nvocab_size: 10\n"
            "seq_length: 8\nglobal_batch_size: 8\nlayers: 3\n",
            "layers: Extra inputs",
        ),
        (
            "num_layers: 2\nhidden_size: 100\nnum_attention_heads: 8\nvocab_size: 10\n"
            "seq_length: 8\nglobal_batch_size: 8\n",
            "not divisible by num_attention_heads",
        ),
        (
            "num_layers: -2\nhidden_size: 128\nnum_attention_heads: 8\nvocab_size: 10\n"
            "seq_length: 8\nglobal_batch_size: 8\n",
            "num_layers: Input should be greater than 0",
        ),
    ],
)
def test_bad_workload_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        load_workload(str(path))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("gpt-9", "unknown model 'gpt-9'"),
    ],
)
def test_unknown_workload_preset(value: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_workload(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("dgx-h900", "unknown cluster"),
        ("dgx-h100:0", "positive integer"),
        ("dgx-h100:x", "positive integer"),
        ("local:2x", "N nodes of M processes"),
        ("local:x1", "N nodes of M processes"),
        ("local:0x1", "positive integer"),
        ("local:2x2x2", "positive integer"),
    ],
)
def test_bad_cluster_values(value: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_cluster(value)


def test_cluster_file_with_unknown_device(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "devices_per_node: 2\ndevice: tpu9\nintra_link: {bandwidth_gbps: 1, latency_us: 1}\n"
    )
    with pytest.raises(InputError, match="unknown device 'tpu9'"):
        load_cluster(str(path))


def test_an_nvl72_preset_counts_racks_of_trays_in_one_nvlink_domain() -> None:
    c = load_cluster("gb200-nvl72:2")
    assert (c.nodes, c.devices_per_node, c.world_size, c.domain_size) == (36, 4, 144, 72)
    assert c.device.generation == load_cluster("dgx-b200:1").device.generation == "blackwell"


def test_a_cluster_file_names_its_nvlink_domain(tmp_path: Path) -> None:
    lab = (
        "nodes: 18\ndevices_per_node: 4\ndevice: gb200\n"
        "intra_link: {bandwidth_gbps: 721.8, latency_us: 1}\n"
    )
    path = tmp_path / "nvl.yaml"
    path.write_text(lab + "nvlink_domain: 72\n")
    assert load_cluster(str(path)).domain_size == 72
    path.write_text(lab + "nvlink_domain: 30\n")
    with pytest.raises(
        InputError, match="nvlink_domain 30 is not a multiple of devices_per_node 4"
    ):
        load_cluster(str(path))
