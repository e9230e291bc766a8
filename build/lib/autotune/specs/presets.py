"""Named workloads, device kinds and clusters.

Link figures are what NCCL's own topology model assigns (see shared research
comm_cost_model.md §1.6 and §4): per-GPU NVLink bandwidth 240 GB/s on DGX-A100
(12 links x 20 GB/s), 370.8 GB/s on DGX-H100/H200 (18 x 20.6) and 721.8 GB/s on Blackwell
(18 x 40.1, NCCL src/graph/topo.h SM100_NVLINK_BW); one HDR (25 GB/s), NDR (50 GB/s) or XDR
(100 GB/s) NIC per GPU between nodes (DGX B200 and GB200 NVL72 trays: ConnectX-7, 400 Gb/s per
GPU; Blackwell Ultra's DGX B300 and GB300 NVL72: ConnectX-8, 800 Gb/s per GPU).
Latencies are first guesses that the estimator's calibration replaces with fitted values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from autotune.specs.cluster import DeviceKind, Link
from autotune.specs.workload import Workload

GiB = 2**30

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        # Trains on CPU in a few tens of milliseconds a step; shaped so that tp=2, pp=2 and
        # vpp=2 are all valid (4 heads, 2 KV groups, 4 layers).
        Workload(
            name="tiny",
            num_layers=4,
            hidden_size=64,
            num_attention_heads=4,
            num_query_groups=2,
            ffn_hidden_size=256,
            vocab_size=512,
            seq_length=64,
            global_batch_size=16,
            precision="fp32",
        ),
        Workload(
            name="gpt-1.3b",
            num_layers=24,
            hidden_size=2048,
            num_attention_heads=16,
            num_query_groups=16,
            ffn_hidden_size=8192,
            vocab_size=51200,
            seq_length=2048,
            global_batch_size=512,
        ),
        Workload(
            name="llama3-8b",
            num_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            num_query_groups=8,
            ffn_hidden_size=14336,
            vocab_size=128256,
            seq_length=8192,
            global_batch_size=128,
            swiglu=True,
        ),
        Workload(
            name="llama3-70b",
            num_layers=80,
            hidden_size=8192,
            num_attention_heads=64,
            num_query_groups=8,
            ffn_hidden_size=28672,
            vocab_size=128256,
            seq_length=8192,
            global_batch_size=128,
            swiglu=True,
        ),
        # Llama 3.1 405B (Llama 3 paper, Table 3): 126 layers, which pp·vpp does not divide;
        # its published recipes (Megatron-Bridge, NeMo) run pp 8 with the embedding and loss
        # counted as layers. Batch: the paper's 16M tokens of 8,192.
        Workload(
            name="llama3.1-405b",
            num_layers=126,
            hidden_size=16384,
            num_attention_heads=128,
            num_query_groups=8,
            ffn_hidden_size=53248,
            vocab_size=128256,
            seq_length=8192,
            global_batch_size=2048,
            swiglu=True,
        ),
        Workload(
            name="gpt3-175b",
            num_layers=96,
            hidden_size=12288,
            num_attention_heads=96,
            num_query_groups=96,
            ffn_hidden_size=49152,
            vocab_size=51200,
            seq_length=2048,
            global_batch_size=1536,
        ),
    )
}

# Llama 3 70B at 64K tokens, as NeMo's llama3_70b_64k recipe (NVIDIA/NeMo
# nemo/collections/llm/recipes/llama3_70b_64k.py): global batch 512 sequences; the recipe runs
# TP8 PP4 CP4 with sequence parallelism on 16 nodes.
WORKLOADS["llama3-70b-64k"] = dataclasses.replace(
    WORKLOADS["llama3-70b"], name="llama3-70b-64k", seq_length=65536, global_batch_size=512
)

# Mixtures of experts, shaped as their published configs (Hugging Face config.json, Megatron
# names) and batched as Megatron-Bridge's performance recipes run them: Mixtral 8x7B (8
# experts, top-2; recipe on 64 H100: TP1 PP4 VPP8 EP8, global batch 256 of 4,096 tokens) and
# Qwen3-30B-A3B (128 experts of width 768, top-8, 128-wide heads on a 2,048 hidden size;
# recipe on 16 H100: EP16, global batch 1,024 of 4,096 tokens; on 8 GPUs: EP8, 512).
WORKLOADS["mixtral-8x7b"] = Workload(
    name="mixtral-8x7b",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_query_groups=8,
    ffn_hidden_size=14336,
    vocab_size=32000,
    seq_length=4096,
    global_batch_size=256,
    swiglu=True,
    num_moe_experts=8,
    moe_router_topk=2,
)
WORKLOADS["qwen3-30b-a3b"] = Workload(
    name="qwen3-30b-a3b",
    num_layers=48,
    hidden_size=2048,
    num_attention_heads=32,
    num_query_groups=4,
    kv_channels=128,
    ffn_hidden_size=6144,
    vocab_size=151936,
    seq_length=4096,
    global_batch_size=512,
    swiglu=True,
    num_moe_experts=128,
    moe_router_topk=8,
    moe_ffn_hidden_size=768,
)

DEVICES: dict[str, DeviceKind] = {
    d.name: d
    for d in (
        # fp32 peaks are the TF32 tensor-core figures, which is what fp32 matmuls run on; fp8
        # (Hopper, Blackwell; mxfp8 runs at the same rate) from NVIDIA's datasheets, dense.
        # Host figures per GPU, from the DGX datasheets (RAM over 8 GPUs, PCIe's x16 rate,
        # the CPUs' DDR channels over 8): DGX A100 2 TB, Gen4 32 GB/s, 2 x EPYC 7742;
        # DGX H100/H200 2 TB, Gen5 64 GB/s, 2 x Xeon 8480C; DGX B200 4 TB, 2 x Xeon 8570;
        # GB200: one Grace (480 GB LPDDR5X, 512 GB/s, NVLink-C2C 900 GB/s) per two GPUs.
        DeviceKind(
            name="a100-80gb",
            memory_bytes=80 * GiB,
            peak_flops={"bf16": 312e12, "fp16": 312e12, "fp32": 156e12},
            memory_bandwidth_bytes_per_s=2.039e12,
            generation="ampere",
            host_memory_bytes=256 * 10**9,
            host_link_bytes_per_s=32e9,
            host_memory_bandwidth_bytes_per_s=51e9,
        ),
        DeviceKind(
            name="h100-sxm",
            memory_bytes=80 * GiB,
            peak_flops={"bf16": 989e12, "fp16": 989e12, "fp32": 494.5e12, "fp8": 1979e12},
            memory_bandwidth_bytes_per_s=3.35e12,
            host_memory_bytes=256 * 10**9,
            host_link_bytes_per_s=64e9,
            host_memory_bandwidth_bytes_per_s=77e9,
        ),
        # Blackwell dense peaks: NVIDIA's DGX B200 and GB200 NVL72 datasheets (4.5 and 5 PFLOP/s
        # dense FP8 per GPU; bf16 half that); memory 180 GB and 186 GB (13.4 TB over 72).
        DeviceKind(
            name="b200",
            memory_bytes=180 * 10**9,
            peak_flops={"bf16": 2.25e15, "fp16": 2.25e15, "fp32": 1.125e15, "fp8": 4.5e15},
            memory_bandwidth_bytes_per_s=8e12,
            generation="blackwell",
            host_memory_bytes=512 * 10**9,
            host_link_bytes_per_s=64e9,
            host_memory_bandwidth_bytes_per_s=90e9,
        ),
        DeviceKind(
            name="gb200",
            memory_bytes=186 * 10**9,
            peak_flops={"bf16": 2.5e15, "fp16": 2.5e15, "fp32": 1.25e15, "fp8": 5e15},
            memory_bandwidth_bytes_per_s=8e12,
            generation="blackwell",
            host_memory_bytes=240 * 10**9,
            host_link_bytes_per_s=225e9,
            host_memory_bandwidth_bytes_per_s=256e9,
            arm_host=True,
        ),
        # Blackwell Ultra: the same dense bf16 and FP8 peaks as B200 and GB200 (NVIDIA's HGX
        # B300 and GB300 NVL72 datasheets: 72 and 720 PFLOP/s sparse FP8 over 8 and 72 GPUs),
        # 288 GB of HBM3e each (2.3 TB over 8; "up to 21 TB" over 72, taken as 288 GB). DGX
        # B300's host: 2 TB over 8 GPUs, 2 x Xeon 6776P, its GPUs on PCIe Gen5 (as B200's).
        # GB300's Grace: "up to 17 TB" LPDDR5X at "up to 14.3 TB/s" over 36 Graces, one per
        # two GPUs, on NVLink-C2C as GB200's.
        DeviceKind(
            name="b300",
            memory_bytes=288 * 10**9,
            peak_flops={"bf16": 2.25e15, "fp16": 2.25e15, "fp32": 1.125e15, "fp8": 4.5e15},
            memory_bandwidth_bytes_per_s=8e12,
            generation="blackwell",
            host_memory_bytes=256 * 10**9,
            host_link_bytes_per_s=64e9,
            host_memory_bandwidth_bytes_per_s=100e9,
        ),
        DeviceKind(
            name="gb300",
            memory_bytes=288 * 10**9,
            peak_flops={"bf16": 2.5e15, "fp16": 2.5e15, "fp32": 1.25e15, "fp8": 5e15},
            memory_bandwidth_bytes_per_s=8e12,
            generation="blackwell",
            host_memory_bytes=236 * 10**9,
            host_link_bytes_per_s=225e9,
            host_memory_bandwidth_bytes_per_s=198e9,
            arm_host=True,
        ),
        DeviceKind(
            name="h200",
            memory_bytes=143771 * 2**20,
            peak_flops={"bf16": 989e12, "fp16": 989e12, "fp32": 494.5e12, "fp8": 1979e12},
            memory_bandwidth_bytes_per_s=4.8e12,
            host_memory_bytes=256 * 10**9,
            host_link_bytes_per_s=64e9,
            host_memory_bandwidth_bytes_per_s=77e9,
        ),
    )
}

NVLINK3 = Link(bandwidth_bytes_per_s=240e9, latency_s=1e-6)
NVLINK4 = Link(bandwidth_bytes_per_s=370.8e9, latency_s=1e-6)
HDR_IB = Link(bandwidth_bytes_per_s=25e9, latency_s=5e-6)
NDR_IB = Link(bandwidth_bytes_per_s=50e9, latency_s=5e-6)
XDR_IB = Link(bandwidth_bytes_per_s=100e9, latency_s=5e-6)

NVLINK5 = Link(bandwidth_bytes_per_s=721.8e9, latency_s=1e-6)


@dataclass(frozen=True)
class ClusterKind:
    """A preset `name:N`: N counts nodes, or for rack-scale systems whole NVLink domains."""

    device: str
    devices_per_node: int
    intra_link: Link
    inter_link: Link
    nodes_per_count: int = 1
    nvlink_domain: int | None = None


CLUSTER_KINDS: dict[str, ClusterKind] = {
    "dgx-a100": ClusterKind("a100-80gb", 8, NVLINK3, HDR_IB),
    "dgx-h100": ClusterKind("h100-sxm", 8, NVLINK4, NDR_IB),
    "dgx-h200": ClusterKind("h200", 8, NVLINK4, NDR_IB),
    "dgx-b200": ClusterKind("b200", 8, NVLINK5, NDR_IB),
    # N racks of 18 compute trays x 4 GPUs, the 72 GPUs of a rack in one NVLink domain.
    "gb200-nvl72": ClusterKind("gb200", 4, NVLINK5, NDR_IB, nodes_per_count=18, nvlink_domain=72),
    "dgx-b300": ClusterKind("b300", 8, NVLINK5, XDR_IB),
    "gb300-nvl72": ClusterKind("gb300", 4, NVLINK5, XDR_IB, nodes_per_count=18, nvlink_domain=72),
}
