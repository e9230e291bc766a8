"""Megatron-core: 3D parallelism with its own schedules, DDP and distributed optimizer.

One translation serves the trial, the exports and the tests: the keyword arguments of
megatron-core's `TransformerConfig`, `DistributedDataParallelConfig` and `OptimizerConfig`,
and the Megatron-LM `pretrain_gpt.py` flags that produce the same objects. Pure: values
that are Python objects in megatron-core (dtypes, activation functions) are `PyExpr`s,
resolved by the worker and written verbatim into the exported snippet.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import shell
from autotune.engines.base import NCCL_KNOBS, NCCL_MEANINGS, Engine
from autotune.errors import InputError
from autotune.estimate.traits import EngineTraits
from autotune.space import Rule, TrainConfig
from autotune.space.pipeline import PipelineSplit, split_layers
from autotune.space.spacefile import SearchSpace
from autotune.specs import Cluster, Workload
from autotune.trial.spec import TrialSpec

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


def _split(c: TrainConfig, w: Workload) -> PipelineSplit | None:
    return split_layers(w.num_layers, c.pp, c.vpp, "megatron")


def _recompute_layers_fit(c: TrainConfig, w: Workload, _: Cluster) -> bool:
    if c.recompute != "full":
        return True
    split = _split(c, w)
    if split is None or not 1 <= c.recompute_num_layers <= min(split.chunks):
        return False
    n = c.recompute_num_layers
    return c.recompute_method == "block" or all(chunk % n == 0 for chunk in split.chunks)


def _placement(c: TrainConfig, w: Workload) -> PipelineSplit:
    split = _split(c, w)
    assert split is not None, "the pipeline_places_layers rule refuses such configs"
    return split


NEEDS_TRANSFORMER_ENGINE = {
    "cp": (1, "its attention, which context parallelism needs"),
    "tp_comm_overlap": (False, "its userbuffers, which tp_comm_overlap needs"),
}
"""Knobs held at these values where Transformer Engine is absent: every trial off them would
crash (megatron-core's own attention has no context parallelism)."""


def without_transformer_engine(space: SearchSpace, where: str) -> SearchSpace:
    """The space with what needs Transformer Engine held off; `where` it is absent."""
    for knob, (value, needs) in NEEDS_TRANSFORMER_ENGINE.items():
        space = space.pinned(knob, value, f"{where} has no Transformer Engine: {needs}")
    return space


def _micro_batches(c: TrainConfig, w: Workload) -> int:
    return c.grad_accum(w.global_batch_size)


class MegatronEngine(Engine):
    name = "megatron"
    worker_module = "autotune.engines.megatron_worker"
    traits = EngineTraits(
        pipeline_split="megatron",
        runs_fp8=True,
        runs_moe=True,
        fp32_master="always",
        fp32_main_grads=True,
        reduces_bf16_grads_in_fp32=True,
        bucket_unit="megabytes",
        one_bucket_without_overlap=True,
        overlap="per_flag",
        script_hint="megatron_args.txt holds the same config as Megatron-LM pretrain_gpt.py "
        "flags, megatron_core.py as megatron-core config objects",
        # Transformer Engine reaches far more of the peak than the kernels Hopper's defaults
        # were fitted on (llm-foundry's): compute efficiency fitted to Megatron's published
        # dense runs, all FP8, so FP8's share of its peak stays the bf16/FP8 pairs' fit; the
        # experts' host time fitted to its MoE runs (`calibration/published_moe_cp.
        # fitted_engine_defaults`, checked by a test; scripts/validate_costmodel.py holds its
        # expert- and context-parallel runs out).
        calibration_overrides=(
            ("hopper", (("compute_efficiency", 0.75), ("moe_expert_host_s", 0.00078))),
            ("blackwell", (("compute_efficiency", 0.71), ("moe_expert_host_s", 0.00078))),
        ),
    )
    knobs = (
        frozenset(
            {
                "tp",
                "pp",
                "vpp",
                "cp",
                "ep",
                "etp",
                "moe_dispatcher",
                "ep_comm_overlap",
                "sp",
                "zero",
                "mbs",
                "recompute",
                "recompute_method",
                "recompute_num_layers",
                "recompute_modules",
                "ddp_bucket_mb",
                "overlap_comm",
                "overlap_param_gather",
                "tp_comm_overlap",
            }
        )
        | NCCL_KNOBS
    )
    knob_meanings = {
        "tp": "--tensor-model-parallel-size",
        "pp": "--pipeline-model-parallel-size",
        "vpp": "model chunks per pipeline rank: --num-layers-per-virtual-pipeline-stage "
        "num_layers/(pp*vpp), or --num-virtual-stages-per-pipeline-rank where the stages are "
        "uneven (--account-for-embedding/loss-in-pipeline-split or "
        "--decoder-first/last-pipeline-num-layers)",
        "cp": "--context-parallel-size (Transformer Engine attention; the gradients are "
        "reduced, and the distributed optimizer sharded, over dp·cp ranks)",
        "ep": "--expert-model-parallel-size (mixtures of experts: the routed experts split "
        "over ep of a stage's tp·cp·dp ranks)",
        "etp": "--expert-tensor-parallel-size (always written: Megatron's default is tp)",
        "moe_dispatcher": "--moe-token-dispatcher-type (alltoall, allgather)",
        "ep_comm_overlap": "--overlap-moe-expert-parallel-comm (one micro-batch's forward "
        "beside another's backward, each one's expert all-to-alls hidden behind the other's "
        "compute)",
        "sp": "--sequence-parallel",
        "zero": "0 plain DDP; 1 --use-distributed-optimizer (optimizer states and fp32 master "
        "weights sharded over data-parallel ranks)",
        "mbs": "--micro-batch-size (--global-batch-size stays)",
        "recompute": "--recompute-granularity (none, selective, full)",
        "recompute_method": "--recompute-method (uniform, block; full recomputation only)",
        "recompute_num_layers": "--recompute-num-layers (full recomputation only)",
        "recompute_modules": "--recompute-modules (selective recomputation only; '+' joins "
        "core_attn, mlp, moe_act, layernorm)",
        "ddp_bucket_mb": "MB of fp32 gradients per bucket: --ddp-bucket-size counts "
        "parameters (MB*2^20/4)",
        "overlap_comm": "--overlap-grad-reduce",
        "overlap_param_gather": "--overlap-param-gather",
        "tp_comm_overlap": "--tp-comm-overlap (Transformer Engine's userbuffers overlap "
        "sequence parallelism's all-gathers and reduce-scatters with the GEMMs; CUDA only)",
        **NCCL_MEANINGS,
    }
    engine_rules = (
        Rule(
            "megatron_cp_splits_the_sequence",
            "context parallelism cuts each sequence into 2·cp equal chunks (causal load "
            "balancing, Megatron-LM get_batch_on_this_cp_rank): seq_length must divide by 2·cp",
            lambda c, w, _k: c.cp == 1 or w.seq_length % (2 * c.cp) == 0,
        ),
        Rule(
            "megatron_moe_tp_needs_sp",
            "a mixture of experts with tp > 1 needs sequence parallelism (megatron-core's "
            "MoELayer.forward raises otherwise: each rank routes its own sequence shard)",
            lambda c, w, _k: not w.is_moe or c.tp == 1 or c.sp,
        ),
        Rule(
            "megatron_zero_is_distributed_optimizer",
            "Megatron has plain DDP (zero 0) or the distributed optimizer (zero 1)",
            lambda c, _w, _k: c.zero <= 1,
        ),
        Rule(
            "megatron_interleaving_microbatches",
            "Megatron's interleaved schedule runs micro-batches in groups of pp",
            lambda c, w, _k: c.vpp == 1 or _micro_batches(c, w) % c.pp == 0,
        ),
        Rule(
            "megatron_param_gather_needs_distopt",
            "--overlap-param-gather needs the distributed optimizer and --overlap-grad-reduce",
            lambda c, _w, _k: not c.overlap_param_gather or (c.zero == 1 and c.overlap_comm),
        ),
        Rule(
            "megatron_tp_comm_overlap_needs_sp",
            "--tp-comm-overlap overlaps sequence parallelism's collectives (Megatron-LM: "
            "'Tensor parallel communication/GEMM overlap can happen only when sequence "
            "parallelism is enabled', which tp 1 turns off)",
            lambda c, _w, _k: not c.tp_comm_overlap or (c.tp > 1 and c.sp),
        ),
        Rule(
            "megatron_ep_comm_overlap_needs_ep_alltoall",
            "--overlap-moe-expert-parallel-comm overlaps the all-to-all token exchange "
            "(megatron-core: 'overlap_moe_expert_parallel_comm is only supported with expert "
            "model parallelism' and with the alltoall/flex token dispatcher)",
            lambda c, _w, _k: (
                not c.ep_comm_overlap or (c.ep > 1 and c.moe_dispatcher == "alltoall")
            ),
        ),
        Rule(
            "megatron_ep_comm_overlap_needs_vpp",
            "with pipelining, the expert-parallel overlap runs in the interleaved schedule only "
            "(megatron-core: 'virtual_pipeline_model_parallel_size must be specified when "
            "pipeline_model_parallel_size > 1')",
            lambda c, _w, _k: not c.ep_comm_overlap or c.pp == 1 or c.vpp > 1,
        ),
        Rule(
            "megatron_ep_comm_overlap_without_full_recompute",
            "the expert-parallel overlap pairs a forward with a backward layer by layer, which "
            "full recomputation reorders (megatron-core asserts recompute_granularity != 'full')",
            lambda c, _w, _k: not c.ep_comm_overlap or c.recompute != "full",
        ),
        Rule(
            "megatron_ep_comm_overlap_needs_half_precision",
            "megatron-core runs the expert-parallel overlap in bf16 or fp16 only",
            lambda c, w, _k: not c.ep_comm_overlap or w.precision in ("bf16", "fp16"),
        ),
        Rule(
            "megatron_overlap_needs_dp",
            "with one data-parallel rank (and no context parallelism) there is no gradient "
            "reduction to overlap",
            lambda c, _w, _k: c.dp * c.cp > 1 or not (c.overlap_comm or c.overlap_param_gather),
        ),
        Rule(
            "megatron_bucket_needs_overlap",
            "without --overlap-grad-reduce Megatron reduces in one bucket: its size does nothing",
            lambda c, _w, _k: c.overlap_comm or c.ddp_bucket_mb == TrainConfig().ddp_bucket_mb,
        ),
        Rule(
            "megatron_recompute_options_need_full",
            "recompute_method and recompute_num_layers apply to full recomputation only",
            lambda c, _w, _k: (
                c.recompute == "full"
                or (c.recompute_method, c.recompute_num_layers)
                == (TrainConfig().recompute_method, TrainConfig().recompute_num_layers)
            ),
        ),
        Rule(
            "megatron_recompute_modules_need_selective",
            "recompute_modules names what selective recomputation reruns (Megatron's default "
            "core_attn otherwise)",
            lambda c, _w, _k: c.recompute == "selective" or c.recompute_modules == "core_attn",
        ),
        Rule(
            "megatron_moe_act_needs_grouped_gemm",
            "moe_act recomputes grouped experts' activations: a mixture of experts in bf16 "
            "(Megatron: 'moe_act in recompute_modules is only supported with "
            "moe_grouped_gemm')",
            lambda c, w, _k: (
                "moe_act" not in c.recompute_modules.split("+")
                or (w.is_moe and w.precision == "bf16")
            ),
        ),
        Rule(
            "megatron_recompute_layers_fit",
            "recompute_num_layers must lie between 1 and the layers of every model chunk, and "
            "divide them with the uniform method (megatron-core checkpoints layers i to i+n "
            "and runs past a chunk's end otherwise)",
            _recompute_layers_fit,
        ),
    )

    def environment(self, cluster: Cluster) -> dict[str, str]:
        # Megatron orders tensor-parallel communication before compute on one CUDA queue.
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if cluster.backend == "nccl" else {}

    def check_runnable(self, cluster: Cluster) -> None:
        if cluster.backend != "nccl":
            raise InputError(
                "the megatron engine needs GPUs: megatron-core's pipeline schedules and "
                "attention allocate on CUDA; on this CPU cluster use --launcher simulate, "
                "autotune plan or autotune estimate (with --model; a Megatron-LM command "
                "is tuned on its GPUs)"
            )
        if shutil.which("nvidia-smi") is None and not Path("/dev/nvidiactl").exists():
            raise InputError(
                f"the megatron engine runs on GPUs and this machine has none; tune "
                f"{cluster.name} from a machine of it, or use --launcher simulate"
            )

    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        args = folder / ARGS_FILE
        args.write_text(args_text(spec.workload, spec.config))
        snippet = folder / SNIPPET_FILE
        snippet.write_text(core_snippet(spec.workload, spec.config))
        return [args, snippet]


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
    moe_layout, moe_shape = _moe_flags(w, c)
    layout += moe_layout
    if c.sp:
        layout.append("--sequence-parallel")
    if c.zero == 1:
        layout.append("--use-distributed-optimizer")
    if c.overlap_comm:
        layout += ["--overlap-grad-reduce", f"--ddp-bucket-size {bucket_parameters(c)}"]
    if c.overlap_param_gather:
        layout.append("--overlap-param-gather")
    if c.tp_comm_overlap:
        layout.append("--tp-comm-overlap")
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
    shape += moe_shape
    shape += [
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
    tokenizer = ["--tokenizer-type NullTokenizer", f"--vocab-size {w.vocab_size}"]
    return [
        ("parallel layout and communication (tuned)", layout),
        ("batch and recomputation (tuned)", batch),
        (f"model shape: {w.name}", shape),
        ("tokenizer as tuned: replace with your own (same vocabulary size)", tokenizer),
    ]


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
