"""Megatron-core worker: GPTModel chunks, Megatron's DDP and optimizer, and its own pipeline
schedules (`get_forward_backward_func`), wired as Megatron-LM's training loop wires them, so
what a trial measures is what `pretrain_gpt.py` with the exported flags runs. Needs CUDA."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.distributed import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
    finalize_model_grads,
)
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import (
    get_gpt_decoder_block_spec,
    get_gpt_layer_local_spec,
    get_gpt_layer_with_transformer_engine_spec,
)
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import get_batch_on_this_cp_rank

from autotune.engines.megatron.exports import (
    PyExpr,
    ddp_config_kwargs,
    gpt_model_kwargs,
    optimizer_config_kwargs,
    transformer_config_kwargs,
)
from autotune.rank import harness, measure
from autotune.rank.model import synthetic_batch
from autotune.space import TrainConfig
from autotune.trial.spec import TrialSpec


def resolve(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The engine's pure kwargs with their `PyExpr`s turned into torch objects."""
    scope = {"torch": torch, "F": F}
    return {
        k: eval(v.source, scope) if isinstance(v, PyExpr) else v  # noqa: S307 - our own text
        for k, v in kwargs.items()
    }


def has_transformer_engine() -> bool:
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        return False
    return True


def layer_spec(config: TransformerConfig, vp_stage: int | None) -> Any:
    """Transformer Engine's layers where installed (what Megatron users run on GPUs), else
    megatron-core's local ones; for a mixture of experts, the decoder block's spec, which
    places MoE and dense layers by `moe_layer_freq` (Megatron-LM's way)."""
    te = has_transformer_engine()
    if config.num_moe_experts:
        return get_gpt_decoder_block_spec(
            config, use_transformer_engine=te, normalization="RMSNorm", vp_stage=vp_stage
        )
    if te:
        return get_gpt_layer_with_transformer_engine_spec()
    return get_gpt_layer_local_spec(normalization="RMSNorm")


def init_model_parallel(c: TrainConfig) -> None:
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=c.tp,
        pipeline_model_parallel_size=c.pp,
        virtual_pipeline_model_parallel_size=c.vpp if c.vpp > 1 else None,
        context_parallel_size=c.cp,
        expert_model_parallel_size=c.ep,
        expert_tensor_parallel_size=c.etp,
    )


def build_chunks(spec: TrialSpec, on_cpu: bool = False) -> list[GPTModel]:
    """This rank's model chunks: its pipeline stage, or its virtual stages when interleaved.

    `on_cpu` (for tests on machines without GPUs) initialises weights on the CPU and leaves
    out rotary embeddings, whose frequencies megatron-core moves to CUDA at every forward,
    and grouped expert GEMMs, which are CUDA kernels (each expert runs alone)."""
    w, c = spec.workload, spec.config
    if c.cp > 1 and not has_transformer_engine():
        raise RuntimeError(
            "context parallelism needs Transformer Engine's attention; megatron-core's local "
            "attention has none (install transformer-engine)"
        )
    if c.tp_comm_overlap:
        _initialize_tp_overlap(spec)
    kwargs = resolve(transformer_config_kwargs(w, c))
    if on_cpu and w.is_moe:
        kwargs["moe_grouped_gemm"] = False
    config = TransformerConfig(**kwargs, use_cpu_initialization=on_cpu)
    model_kwargs = gpt_model_kwargs(w)
    if on_cpu:
        model_kwargs["position_embedding_type"] = "none"
    chunks = []
    for index in range(c.vpp):
        vp_stage = index if c.vpp > 1 else None
        chunks.append(
            GPTModel(
                config,
                layer_spec(config, vp_stage),
                pre_process=parallel_state.is_pipeline_first_stage(
                    ignore_virtual=False, vp_stage=vp_stage
                ),
                post_process=parallel_state.is_pipeline_last_stage(
                    ignore_virtual=False, vp_stage=vp_stage
                ),
                vp_stage=vp_stage,
                **model_kwargs,
            )
        )
    return chunks


def _initialize_tp_overlap(spec: TrialSpec) -> None:
    """Transformer Engine's userbuffers for --tp-comm-overlap, as Megatron-LM's
    _initialize_tp_communicators sets them up before the model is built (CUDA only)."""
    if not (has_transformer_engine() and torch.cuda.is_available()):
        raise RuntimeError(
            "tp_comm_overlap needs Transformer Engine on CUDA devices (its userbuffers)"
        )
    from transformer_engine.pytorch import module as te_module

    w, c = spec.workload, spec.config
    if torch.cuda.get_device_capability()[0] < 9:  # no CUDA multicast before Hopper
        os.environ.setdefault("UB_SKIPMC", "1")
    te_module.base.initialize_ub(
        shape=[w.seq_length * c.mbs // c.cp, w.hidden_size],
        tp_size=c.tp,
        use_fp8=w.fp8 != "none",
        bootstrap_backend="nccl",
    )


def _one_or_list(items: list[Any]) -> Any:
    """Megatron's schedule hooks take a function per chunk, or a bare one for one chunk."""
    return items[0] if len(items) == 1 else items


def _mean_loss(output: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    loss = output.float().mean()
    return loss, {"lm loss": loss.detach()}


class MegatronSession:
    def __init__(self, spec: TrialSpec, folder: Path) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError(
                "megatron-core trials need CUDA: its schedules and attention allocate on GPUs"
            )
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend=spec.cluster.backend)
        self.device = torch.device("cuda", torch.cuda.current_device())
        w, c = spec.workload, spec.config
        if w.fp8 != "none" and not has_transformer_engine():
            raise RuntimeError(f"fp8 {w.fp8} needs Transformer Engine, which is not installed")
        init_model_parallel(c)
        model_parallel_cuda_manual_seed(0)
        chunks = [chunk.to(self.device) for chunk in build_chunks(spec)]
        config = chunks[0].config
        if config.bf16 or config.fp16:  # as Megatron-LM's get_model: 16-bit weights and compute
            chunks = [Float16Module(config, chunk) for chunk in chunks]
        ddp_config = DistributedDataParallelConfig(**ddp_config_kwargs(w, c))
        self.model = [
            # Later chunks' communication overlaps with compute anyway (as Megatron-LM).
            DistributedDataParallel(
                config=config, ddp_config=ddp_config, module=chunk, disable_bucketing=index > 0
            )
            for index, chunk in enumerate(chunks)
        ]
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(**resolve(optimizer_config_kwargs(w, c))), self.model
        )
        # The hooks Megatron-LM's train() installs for overlapped gradient reduction and
        # parameter gathers, and the gradient finalisation the schedules call.
        if c.overlap_comm:
            config.no_sync_func = _one_or_list([m.no_sync for m in self.model])
            config.grad_sync_func = _one_or_list([m.start_grad_sync for m in self.model])
        if c.overlap_param_gather:
            config.param_sync_func = _one_or_list([m.start_param_sync for m in self.model])
        config.finalize_model_grads_func = finalize_model_grads
        config.grad_scale_func = self.optimizer.scale_loss
        self.micro_batches = c.grad_accum(w.global_batch_size)
        self.seq_length, self.mbs = w.seq_length, c.mbs
        tokens, labels = synthetic_batch(w, c.mbs, seed=0)
        position_ids = torch.arange(w.seq_length).unsqueeze(0).expand(c.mbs, -1)
        # This rank's share of each sequence under context parallelism: chunks r and
        # 2·cp-1-r of 2·cp, as Megatron-LM's get_batch (a no-op when cp is 1).
        batch = get_batch_on_this_cp_rank(
            {"tokens": tokens, "labels": labels, "position_ids": position_ids}
        )
        self.tokens = batch["tokens"].to(self.device)
        self.labels = batch["labels"].to(self.device)
        self.position_ids = batch["position_ids"].to(self.device)
        self.forward_backward = get_forward_backward_func()

    def _forward_step(
        self, data_iterator: Iterator[None], model: torch.nn.Module
    ) -> tuple[torch.Tensor, Callable[[torch.Tensor], Any]]:
        next(data_iterator)
        output = model(self.tokens, self.position_ids, None, labels=self.labels)
        return output, _mean_loss

    def step(self, observe: Callable[[], None] | None = None) -> None:
        for chunk in self.model:
            chunk.zero_grad_buffer()
        self.optimizer.zero_grad()
        self.forward_backward(
            forward_step_func=self._forward_step,
            data_iterator=_one_or_list([itertools.repeat(None) for _ in self.model]),
            model=_one_or_list(self.model),
            num_microbatches=self.micro_batches,
            seq_length=self.seq_length,
            micro_batch_size=self.mbs,
            forward_only=False,
        )
        if observe is not None:  # Megatron's buffers are allocated up front: any point serves
            observe()
        self.optimizer.step()

    def model_state(self) -> measure.StateTally:
        tally = measure.StateTally()
        for chunk in self.model:
            for param in chunk.parameters():
                tally.add("params", param)
            for buffer in chunk.buffers + chunk.expert_parallel_buffers:
                tally.add("grads", buffer.grad_data)  # every main_grad is a view into these
        for megatron_optimizer in getattr(self.optimizer, "chained_optimizers", [self.optimizer]):
            tally.add_optimizer(megatron_optimizer.optimizer, params_kind="optimizer")
        return tally


def main(args: list[str], started: float) -> None:
    harness.main(MegatronSession, args, started)
