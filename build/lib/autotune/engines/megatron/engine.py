"""Megatron-core: 3D parallelism with its own schedules, DDP and distributed optimizer; its
knobs, rules and traits. Its files are written by `exports.py`. Pure."""

from __future__ import annotations

import shutil
from pathlib import Path

from autotune.engines.base import NCCL_KNOBS, NCCL_MEANINGS, Engine
from autotune.engines.megatron.exports import ARGS_FILE, SNIPPET_FILE, args_text, core_snippet
from autotune.engines.megatron.jobs import MegatronLM
from autotune.errors import InputError
from autotune.estimate.traits import EngineTraits
from autotune.space import Rule, TrainConfig
from autotune.space.pipeline import PipelineSplit, split_layers
from autotune.specs import Cluster, Workload
from autotune.trial.spec import TrialSpec


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


class MegatronEngine(Engine):
    name = "megatron"
    needs = ("torch",)
    """megatron-core is not required here: a Megatron-LM checkout beside the command has it."""
    worker_module = "autotune.engines.megatron.worker"
    frameworks = (MegatronLM(),)
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
        # are fitted on (llm-foundry's): compute efficiency fitted to Megatron's published
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
            lambda c, w, _k: c.vpp == 1 or c.grad_accum(w.global_batch_size) % c.pp == 0,
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
        super().check_runnable(cluster)
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
