"""Megatron's files for a config, from one translation that serves the trial, the exports and
the tests: the keyword arguments of megatron-core's `TransformerConfig`,
`DistributedDataParallelConfig` and `OptimizerConfig`, and the Megatron-LM `pretrain_gpt.py`
flags that produce the same objects. Pure: values that are Python objects in megatron-core
(dtypes, activation functions) are `PyExpr`s, resolved by the worker and written verbatim
into the exported snippet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune import shell
from autotune.space import TrainConfig
from autotune.space.pipeline import PipelineSplit, split_layers
from autotune.specs import Workload

ARGS_FILE = "megatron_args.txt"
SNIPPET_FILE = "megatron_core.py"
FP32_GRAD_BYTES = 4
LEARNING_RATE = 1e-4


@dataclass(frozen=True)
class PyExpr:
    """A Python expression over `torch` and `F` (torch.nn.functional), kept as source."""

    source: str

    def __repr__(self) -> str:
        return self.source


DTYPES = {"bf16": PyExpr("torch.bfloat16"), "fp16": PyExpr("torch.float16")}


def _placement(c: TrainConfig, w: Workload) -> PipelineSplit:
    split = split_layers(w.num_layers, c.pp, c.vpp, "megatron")
    assert split is not None, "the pipeline_places_layers rule refuses such configs"
    return split


def _micro_batches(c: TrainConfig, w: Workload) -> int:
    return c.grad_accum(w.global_batch_size)


def transformer_config_kwargs(w: Workload, c: TrainConfig) -> dict[str, Any]:
    """`TransformerConfig(**...)`: the model shape (as autotune's decoder: RMSNorm, no biases,
    no dropout, untied embeddings) and the layout and recomputation of this config."""
    full = c.recompute == "full"
    dtype = DTYPES.get(w.precision, PyExpr("torch.float32"))
    return {
        "num_layers": w.num_layers,
        "hidden_size": w.hidden_size,
        "ffn_hidden_size": w.ffn_hidden_size,
        "num_attention_heads": w.num_attention_heads,
        "num_query_groups": w.num_query_groups,
        **({"kv_channels": w.kv_channels} if w.kv_channels else {}),
        **_moe_kwargs(w, c),
        "normalization": "RMSNorm",
        "add_bias_linear": False,
        "gated_linear_unit": w.swiglu,
        "activation_func": PyExpr("F.silu" if w.swiglu else "F.gelu"),
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "bf16": w.precision == "bf16",
        "fp16": w.precision == "fp16",
        **({"fp8": "hybrid", "fp8_recipe": w.fp8} if w.fp8 != "none" else {}),
        "params_dtype": dtype,
        "pipeline_dtype": dtype,
        "tensor_model_parallel_size": c.tp,
        "pipeline_model_parallel_size": c.pp,
        "virtual_pipeline_model_parallel_size": c.vpp if c.vpp > 1 else None,
        # Megatron-LM's default with interleaving (--no-overlap-p2p-communication turns it
        # off), which lets the interleaved schedule run on two stages; it sends one at a time
        # (megatron-core: overlap "must be False if batch_p2p_comm is true").
        **({"overlap_p2p_comm": True, "batch_p2p_comm": False} if c.vpp > 1 else {}),
        **({"context_parallel_size": c.cp} if c.cp > 1 else {}),
        **_uneven_split_kwargs(_placement(c, w)),
        "sequence_parallel": c.sp,
        **({"tp_comm_overlap": True} if c.tp_comm_overlap else {}),
        "recompute_granularity": None if c.recompute == "none" else c.recompute,
        **(
            {"recompute_modules": c.recompute_modules.split("+")}
            if c.recompute == "selective" and c.recompute_modules != "core_attn"
            else {}
        ),
        "recompute_method": c.recompute_method if full else None,
        "recompute_num_layers": c.recompute_num_layers if full else None,
        "deallocate_pipeline_outputs": True,
    }


def _moe_kwargs(w: Workload, c: TrainConfig) -> dict[str, Any]:
    """TransformerConfig's mixture-of-experts fields (none for a dense model): the shape,
    the expert layout and dispatcher, and grouped GEMMs for the experts, as every published
    recipe runs them (bf16 only: Megatron-LM's grouped GEMM takes no other dtype)."""
    if not w.is_moe:
        return {}
    return {
        "num_moe_experts": w.num_moe_experts,
        "moe_router_topk": w.moe_router_topk,
        "moe_ffn_hidden_size": w.expert_ffn_size,
        **(
            {"moe_shared_expert_intermediate_size": w.moe_shared_expert_intermediate_size}
            if w.moe_shared_expert_intermediate_size
            else {}
        ),
        "moe_layer_freq": w.moe_layer_freq,
        "moe_token_dispatcher_type": c.moe_dispatcher,
        **({"overlap_moe_expert_parallel_comm": True} if c.ep_comm_overlap else {}),
        "moe_grouped_gemm": w.precision == "bf16",
        "expert_model_parallel_size": c.ep,
        "expert_tensor_parallel_size": c.etp,
    }


def _moe_flags(w: Workload, c: TrainConfig) -> tuple[list[str], list[str]]:
    """(layout flags, shape flags) of a mixture of experts; both empty for a dense model."""
    if not w.is_moe:
        return [], []
    layout = [
        f"--expert-model-parallel-size {c.ep}",
        f"--expert-tensor-parallel-size {c.etp}",
        f"--moe-token-dispatcher-type {c.moe_dispatcher}",
        *(["--overlap-moe-expert-parallel-comm"] if c.ep_comm_overlap else []),
    ]
    shape = [
        f"--num-experts {w.num_moe_experts}",
        f"--moe-router-topk {w.moe_router_topk}",
        f"--moe-ffn-hidden-size {w.expert_ffn_size}",
        *(
            [f"--moe-shared-expert-intermediate-size {w.moe_shared_expert_intermediate_size}"]
            if w.moe_shared_expert_intermediate_size
            else []
        ),
        *([f"--moe-layer-freq {w.moe_layer_freq}"] if w.moe_layer_freq != 1 else []),
        # Megatron-LM's grouped expert GEMMs take bf16 only.
        *(["--moe-grouped-gemm"] if w.precision == "bf16" else []),
    ]
    return layout, shape


def _uneven_split_kwargs(split: PipelineSplit) -> dict[str, Any]:
    """TransformerConfig's fields for layers that pp·vpp does not divide (none when it does)."""
    if split.placement == "embedding_and_loss":
        return {
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
        }
    if split.placement == "first_last":
        return {
            "num_layers_in_first_pipeline_stage": split.first_layers,
            "num_layers_in_last_pipeline_stage": split.last_layers,
        }
    return {}


def ddp_config_kwargs(w: Workload, c: TrainConfig) -> dict[str, Any]:
    """`DistributedDataParallelConfig(**...)`, as Megatron-LM's training loop builds it: fp32
    gradient reduction under bf16, one bucket unless gradient reduction overlaps."""
    return {
        "grad_reduce_in_fp32": w.precision == "bf16",
        "overlap_grad_reduce": c.overlap_comm,
        "overlap_param_gather": c.overlap_param_gather,
        "use_distributed_optimizer": c.zero == 1,
        "bucket_size": bucket_parameters(c) if c.overlap_comm else None,
    }


def optimizer_config_kwargs(w: Workload, c: TrainConfig) -> dict[str, Any]:
    """`OptimizerConfig(**...)`: Adam with fp32 master weights, as in Megatron-LM."""
    return {
        "optimizer": "adam",
        "lr": LEARNING_RATE,
        "weight_decay": 0.01,
        "clip_grad": 1.0,
        "bf16": w.precision == "bf16",
        "fp16": w.precision == "fp16",
        "params_dtype": DTYPES.get(w.precision, PyExpr("torch.float32")),
        "use_distributed_optimizer": c.zero == 1,
    }


def gpt_model_kwargs(w: Workload) -> dict[str, Any]:
    """`GPTModel(config, layer_spec, **...)` besides the pipeline stage arguments."""
    return {
        "vocab_size": w.vocab_size,
        "max_sequence_length": w.seq_length,
        "position_embedding_type": "rope",
        "share_embeddings_and_output_weights": False,
    }


def bucket_parameters(c: TrainConfig) -> int:
    """--ddp-bucket-size counts parameters; the knob is MB of fp32 gradients."""
    return c.ddp_bucket_mb * 2**20 // FP32_GRAD_BYTES


def pretrain_gpt_flags(w: Workload, c: TrainConfig) -> list[tuple[str, list[str]]]:
    """Megatron-LM `pretrain_gpt.py` flags in groups: (comment, ["--flag value", ...])."""
    moe_layout, moe_shape = _moe_flags(w, c)
    tokenizer = ["--tokenizer-type NullTokenizer", f"--vocab-size {w.vocab_size}"]
    return [
        (
            "parallel layout and communication (tuned)",
            _layout_flags(w, c) + moe_layout + _comm_flags(c),
        ),
        ("batch and recomputation (tuned)", _batch_flags(w, c)),
        (f"model shape: {w.name}", _shape_flags(w, moe_shape)),
        ("tokenizer as tuned: replace with your own (same vocabulary size)", tokenizer),
    ]


def _layout_flags(w: Workload, c: TrainConfig) -> list[str]:
    """Tensor, pipeline (with its split of the layers) and context parallelism."""
    layout = [
        f"--tensor-model-parallel-size {c.tp}",
        f"--pipeline-model-parallel-size {c.pp}",
    ]
    split = _placement(c, w)
    if c.vpp > 1 and split.placement == "even":
        layout.append(f"--num-layers-per-virtual-pipeline-stage {split.chunks[0]}")
    elif c.vpp > 1:  # the per-stage layer count flag cannot be combined with uneven stages
        layout.append(f"--num-virtual-stages-per-pipeline-rank {c.vpp}")
    if split.placement == "embedding_and_loss":
        layout += [
            "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split",
        ]
    elif split.placement == "first_last":
        layout += [
            f"--decoder-first-pipeline-num-layers {split.first_layers}",
            f"--decoder-last-pipeline-num-layers {split.last_layers}",
        ]
    if c.cp > 1:
        layout.append(f"--context-parallel-size {c.cp}")
    return layout


def _comm_flags(c: TrainConfig) -> list[str]:
    """Sequence parallelism, the distributed optimizer and the overlaps."""
    flags = []
    if c.sp:
        flags.append("--sequence-parallel")
    if c.zero == 1:
        flags.append("--use-distributed-optimizer")
    if c.overlap_comm:
        flags += ["--overlap-grad-reduce", f"--ddp-bucket-size {bucket_parameters(c)}"]
    if c.overlap_param_gather:
        flags.append("--overlap-param-gather")
    if c.tp_comm_overlap:
        flags.append("--tp-comm-overlap")
    return flags


def _batch_flags(w: Workload, c: TrainConfig) -> list[str]:
    batch = [f"--micro-batch-size {c.mbs}", f"--global-batch-size {w.global_batch_size}"]
    if c.recompute != "none":
        batch.append(f"--recompute-granularity {c.recompute}")
    if c.recompute == "selective" and c.recompute_modules != "core_attn":  # its default
        batch.append(f"--recompute-modules {' '.join(c.recompute_modules.split('+'))}")
    if c.recompute == "full":
        batch += [
            f"--recompute-method {c.recompute_method}",
            f"--recompute-num-layers {c.recompute_num_layers}",
        ]
    return batch


def _shape_flags(w: Workload, moe_shape: list[str]) -> list[str]:
    shape = [
        f"--num-layers {w.num_layers}",
        f"--hidden-size {w.hidden_size}",
        f"--ffn-hidden-size {w.ffn_hidden_size}",
        f"--num-attention-heads {w.num_attention_heads}",
    ]
    if w.num_query_groups != w.num_attention_heads:
        shape += ["--group-query-attention", f"--num-query-groups {w.num_query_groups}"]
    if w.kv_channels:
        shape.append(f"--kv-channels {w.kv_channels}")
    return (
        shape
        + moe_shape
        + [
            f"--seq-length {w.seq_length}",
            f"--max-position-embeddings {w.seq_length}",
            "--position-embedding-type rope",
            "--normalization RMSNorm",
            "--disable-bias-linear",
            *(["--swiglu"] if w.swiglu else []),
            "--untie-embeddings-and-output-weights",
            "--attention-dropout 0",
            "--hidden-dropout 0",
            *([f"--{w.precision}"] if w.precision != "fp32" else []),
            # E4M3 forward, E5M2 gradients: what NVIDIA's published FP8 recipes use.
            *(["--fp8-format hybrid", f"--fp8-recipe {w.fp8}"] if w.fp8 != "none" else []),
        ]
    )


def args_text(w: Workload, c: TrainConfig, banner: list[str] | None = None) -> str:
    """megatron_args.txt: one flag per line under `#` comments."""
    lines = [
        *(banner or []),
        "# Megatron-LM pretrain_gpt.py flags for this config. Use:",
        "#   torchrun ... pretrain_gpt.py $(grep -v '^#' megatron_args.txt) --data-path ...",
    ]
    for comment, flags in pretrain_gpt_flags(w, c):
        lines += [shell.comment(comment), *flags]
    return "\n".join(lines) + "\n"


def _call(name: str, kwargs: dict[str, Any]) -> str:
    body = "".join(f"    {key}={value!r},\n" for key, value in kwargs.items())
    return f"{name}(\n{body})"


def core_snippet(w: Workload, c: TrainConfig, banner: list[str] | None = None) -> str:
    """megatron_core.py: the config objects of this config, for megatron-core scripts."""
    return "\n".join(
        [
            *(banner or []),
            '"""megatron-core config objects of the tuned config; pass them to GPTModel,',
            "DistributedDataParallel and get_megatron_optimizer in your training script.",
            "Under bf16 or fp16, wrap each GPTModel in",
            "megatron.core.transformer.module.Float16Module(transformer_config, model) before",
            "DistributedDataParallel, as Megatron-LM's get_model does: the measured trials did.",
            *(
                [
                    "Context parallel: call parallel_state.initialize_model_parallel(...,",
                    f"context_parallel_size={c.cp}) and give each rank its share of every batch",
                    "with megatron.core.utils.get_batch_on_this_cp_rank, as Megatron-LM's",
                    "get_batch does; attention must be Transformer Engine's.",
                ]
                if c.cp > 1
                else []
            ),
            *(
                [
                    "Tensor-parallel overlap: before building the model, call Transformer",
                    "Engine's initialize_ub(shape=[seq_length * micro_batch_size // cp,",
                    f"hidden_size], tp_size={c.tp}, ...) as Megatron-LM's",
                    "_initialize_tp_communicators does, with CUDA_DEVICE_MAX_CONNECTIONS=1",
                    "(and UB_SKIPMC=1 on GPUs before Hopper, which lack CUDA multicast).",
                ]
                if c.tp_comm_overlap
                else []
            ),
            '"""',
            "",
            "import torch",
            "import torch.nn.functional as F",
            "from megatron.core.distributed import DistributedDataParallelConfig",
            "from megatron.core.optimizer import OptimizerConfig",
            "from megatron.core.transformer.transformer_config import TransformerConfig",
            "",
            f"transformer_config = {_call('TransformerConfig', transformer_config_kwargs(w, c))}",
            f"ddp_config = {_call('DistributedDataParallelConfig', ddp_config_kwargs(w, c))}",
            f"optimizer_config = {_call('OptimizerConfig', optimizer_config_kwargs(w, c))}",
            f"gpt_model_kwargs = {_call('dict', gpt_model_kwargs(w))}",
            f"num_microbatches = {_micro_batches(c, w)}",
            "",
        ]
    )
