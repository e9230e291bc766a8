"""NCCL's cost model by hand (comm_cost_model.md §1.3, §1.4, §1.10) and against §4."""

import pytest

from autotune.estimate.collectives import Fabric, bus_bandwidth, candidate, collective_time
from autotune.estimate.comm import Group, place, seconds
from autotune.estimate.published_collectives import LATENCIES, PLATEAUS, Measured
from autotune.specs import load_cluster

H100 = Fabric(generation="hopper", nvlink_gbps=370.8, nic_gbps=50.0)
A100 = Fabric(generation="ampere", nvlink_gbps=240.0, nic_gbps=25.0)


@pytest.mark.parametrize(
    ("algo", "proto", "latency_us", "algbw"),
    [
        ("Ring", "LL", 6.6 + 14 * 0.6, 80.6),  # 12 ch x 30 x 0.5 = 180 busbw, x 8/14
        ("Ring", "LL128", 14 + 14 * 1.9, 189.3),  # min(360 x 0.92, 12 x 36.7) x 8/14
        ("Ring", "Simple", 8.4 + 14 * 3.4, 205.7),  # 360 x 8/14
        ("Tree", "LL", 6.8 + 2 * 7 * 0.6, 43.6),  # min(331.2/3.8, 141) x 0.5
        ("Tree", "LL128", 14 + 2 * 7 * 1.25, 128.8),  # 331.2 x 7/9 x 0.5
        ("Tree", "Simple", 8.4 + 2 * 7 * 4.0, 165.6),  # 360 x 0.92 x 0.5
        ("NVLS", "Simple", 25.0, 272.0),  # 8 x 40 x .85 x 7/8 x 2 x 8/14
    ],
)
def test_8xh100_allreduce_table(algo: str, proto: str, latency_us: float, algbw: float) -> None:
    c = candidate("all_reduce", algo, proto, 8, 1, H100)
    assert c is not None
    assert c.latency_us == pytest.approx(latency_us)
    assert c.algbw_gbps == pytest.approx(algbw, rel=2e-3)


B200 = Fabric(generation="blackwell", nvlink_gbps=721.8, nic_gbps=50.0)


@pytest.mark.parametrize(
    ("algo", "proto", "algbw"),
    [
        # SM100's search speeds: 721.8 / 6 -> 90 GB/s a channel, halved over 12 channels
        ("Ring", "Simple", 308.6),  # 12 x 45 = 540 busbw, x 8/14
        ("Ring", "LL128", 274.3),  # min(540 x 0.92, 12 x 40) x 8/14
        ("Tree", "Simple", 248.4),  # min(540 x 0.92, 12 x 70) x 0.5
        ("NVLS", "Simple", 473.6),  # 8 x 80 x .74 x 7/8 x 2 x 8/14
    ],
)
def test_8xb200_allreduce_is_priced_on_nccls_blackwell_tables(
    algo: str, proto: str, algbw: float
) -> None:
    c = candidate("all_reduce", algo, proto, 8, 1, B200)
    assert c is not None
    assert c.algbw_gbps == pytest.approx(algbw, rel=2e-3)


def test_nvls_takes_at_most_32_channels_in_an_nvl72_rack() -> None:
    # NCCL_MAX_NVLS_ARITY: 32 channels x 20 GB/s (721.8 / 33 -> 20), not one per GPU
    c = candidate("all_reduce", "NVLS", "Simple", 72, 1, B200)
    assert c is not None
    assert c.algbw_gbps == pytest.approx(32 * 20 * 0.74 * 31 / 32 * 2 * 72 / 142, rel=2e-3)


def test_blackwell_nvlstree_is_size_corrected_on_x86_hosts_only() -> None:
    # tuning.cc: NVLSTree all-reduce takes the tree correction on SM100 with an x86 host
    # (DGX B200), not with GB200's Grace; 64 MiB is log2(2^26 / 64) = 20: Simple's 0.8.
    arm = Fabric(generation="blackwell", nvlink_gbps=721.8, nic_gbps=50.0, x86_host=False)
    x86, _ = collective_time("all_reduce", 2**26, 16, 2, B200, "NVLSTree", "Simple")
    grace, _ = collective_time("all_reduce", 2**26, 16, 2, arm, "NVLSTree", "Simple")
    c = candidate("all_reduce", "NVLSTree", "Simple", 16, 2, B200)
    assert c is not None
    moved = 2**26 / (1000 * c.algbw_gbps) * 1e-6
    assert x86 - grace == pytest.approx(moved / 0.8 - moved, rel=1e-6)


def test_three_nodes_tree_ll_matches_ncclss_own_log() -> None:
    """NVIDIA/nccl#1453: `64 Bytes -> Algo 0 proto 0 time 25.207382` on 3 x 8 H100."""
    t, c = collective_time("all_reduce", 64, 24, 3, H100, "Tree", "LL")
    assert (c.algo, c.proto) == ("Tree", "LL")
    assert t * 1e6 == pytest.approx(25.207382, abs=0.01)


def test_default_is_nccls_argmin() -> None:
    small, c_small = collective_time("all_reduce", 1024, 8, 1, H100)
    assert (c_small.algo, c_small.proto) == ("Ring", "LL")
    for algo in ("Ring", "Tree", "NVLS"):
        for proto in ("LL", "LL128", "Simple"):
            if candidate("all_reduce", algo, proto, 8, 1, H100) is not None:
                assert small <= collective_time("all_reduce", 1024, 8, 1, H100, algo, proto)[0]
    _, c_big = collective_time("all_reduce", 2**30, 8, 1, H100)
    assert c_big.algo == "NVLS"


def test_allgather_sizes_are_the_whole_buffer_and_ring_only_on_a100() -> None:
    t, c = collective_time("all_gather", 2**20, 8, 1, A100)
    assert c.algo == "Ring"
    assert bus_bandwidth("all_gather", 2**20, t, 8) < 240


def test_forced_algorithm_a_collective_lacks_falls_back_to_nccls_choice() -> None:
    forced = collective_time("all_gather", 2**20, 8, 1, A100, "Tree", "default")
    assert forced == collective_time("all_gather", 2**20, 8, 1, A100)


@pytest.mark.parametrize("m", PLATEAUS + LATENCIES, ids=lambda m: f"row{m.row}-{m.system}")
def test_published_measurements_within_15_percent(m: Measured) -> None:
    t, _ = collective_time("all_reduce", m.size_bytes, m.ranks, m.nodes, m.fabric, m.algo)
    if m.busbw_gbps:
        assert bus_bandwidth("all_reduce", m.size_bytes, t, m.ranks) == pytest.approx(
            m.busbw_gbps, rel=0.15
        )
    elif m.size_bytes < 64:
        # Below NCCL's own latency floor (4 B on H20: 12.5 us measured): the model's floor
        # errs slow, by at most a quarter, never fast.
        assert m.latency_us <= t * 1e6 <= 1.25 * m.latency_us
    else:
        assert t * 1e6 == pytest.approx(m.latency_us, rel=0.15)


def test_group_placement_follows_megatron_rank_order() -> None:
    assert place(8, 1, 8) == Group(size=8, nodes=1)  # tp inside a node
    assert place(16, 8, 8) == Group(size=16, nodes=16)  # dp with tp=8: one rank per node
    assert place(16, 2, 8) == Group(size=16, nodes=4)  # dp with tp=2: 4 per node
    assert place(4, 64, 8) == Group(size=4, nodes=4)  # pp across nodes


def test_gloo_rings_are_alpha_beta_on_the_host_link(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cluster = load_cluster("local:4")
    link = cluster.intra_link
    size = 4e6
    expected = 6 * link.latency_s + size * 2 * 3 / 4 / link.bandwidth_bytes_per_s
    assert seconds("all_reduce", size, Group(4, 1), cluster) == pytest.approx(expected)
