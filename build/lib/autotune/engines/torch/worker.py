"""PyTorch-native worker: a (pp, dp, cp, tp) device mesh, dp as (replicate, shard) for HSDP,
DTensor TP, DDP/ZeRO/FSDP2, pipelining, context parallel ring attention."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleInterleaved1F1B,
)
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.nn.parallel import DistributedDataParallel

from autotune.rank import harness, measure
from autotune.rank.model import Decoder, lm_loss, stage_layers, synthetic_batch
from autotune.space import TrainConfig
from autotune.trial.spec import TrialSpec

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _joined_device(backend: str) -> torch.device:
    """This rank's device, in the world's process group (a warm pool's ranks keep theirs)."""
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _optimizer(
    params: list[nn.Parameter], c: TrainConfig, dp_mesh: DeviceMesh
) -> torch.optim.Optimizer:
    """AdamW, its states sharded over data-parallel ranks at zero 1."""
    if c.zero == 1:
        return ZeroRedundancyOptimizer(
            params, optimizer_class=torch.optim.AdamW, lr=1e-4, process_group=dp_mesh.get_group()
        )
    return torch.optim.AdamW(params, lr=1e-4)


class TorchSession:
    def __init__(self, spec: TrialSpec, folder: Path) -> None:
        w, c = spec.workload, spec.config
        self.device = _joined_device(spec.cluster.backend)
        refuse_context_parallel_off_cuda(c, self.device)
        self.config = c
        self.grad_accum = c.grad_accum(w.global_batch_size)
        self.low_precision = DTYPES.get(w.precision)
        # dp as (replicate, shard): HSDP shards over the inner dimension and replicates over
        # the outer; without it the shard dimension is the whole of dp. Context-parallel ranks
        # hold the same weights: FSDP2 shards them over dp·cp (torchtitan's dp_shard_cp).
        mesh = init_device_mesh(
            self.device.type,
            (c.pp, c.hsdp, c.dp // c.hsdp, c.cp, c.tp),
            mesh_dim_names=("pp", "replicate", "shard", "cp", "tp"),
        )
        dp_mesh = mesh["shard"] if c.hsdp == 1 else mesh["replicate", "shard"]
        self.cp_mesh: DeviceMesh | None = None
        if c.cp > 1:  # rules: FSDP2 alone beside it, no tp, pp or HSDP
            dp_mesh = mesh["shard", "cp"]._flatten("shard_cp")
            self.cp_mesh = mesh["cp"]
        torch.manual_seed(0)
        stage_ids = [mesh["pp"].get_local_rank() + k * c.pp for k in range(c.vpp)]
        self.modules = self._stage_modules(spec, mesh, stage_ids)
        if c.dp * c.cp > 1:
            self.modules = [self._data_parallel(m, dp_mesh, c) for m in self.modules]
        self.optimizer = _optimizer([p for m in self.modules for p in m.parameters()], c, dp_mesh)
        tokens, labels = synthetic_batch(w, c.mbs, seed=0)
        self.batch = (tokens.to(self.device), labels.to(self.device))
        self.schedule: Schedule1F1B | ScheduleInterleaved1F1B | None = None
        if c.pp > 1:
            self._pipeline(mesh, stage_ids)

    def _stage_modules(
        self, spec: TrialSpec, mesh: DeviceMesh, stage_ids: list[int]
    ) -> list[nn.Module]:
        """This rank's pipeline chunks of the decoder, tensor-parallel where tp > 1."""
        w, c = spec.workload, spec.config
        n_stages = c.pp * c.vpp
        modules: list[nn.Module] = [
            Decoder(
                w,
                c.recompute,
                layers=stage_layers(w.num_layers, c.pp, c.vpp, s),
                first=s == 0,
                last=s == n_stages - 1,
            ).to(self.device)
            for s in stage_ids
        ]
        for module in modules:
            if c.tp > 1:
                tensor_parallel(cast(Decoder, module), mesh["tp"], c.sp)
            if c.cp > 1:  # as torchtitan: the ring passes as many key and value as query heads
                for block in cast(Decoder, module).blocks.values():
                    cast(Any, block).attn.repeat_kv = True
        return modules

    def _pipeline(self, mesh: DeviceMesh, stage_ids: list[int]) -> None:
        """torch.distributed.pipelining's schedule over this rank's stages."""
        c = self.config
        n_stages = c.pp * c.vpp
        stages: list[Any] = [
            PipelineStage(m, s, n_stages, self.device, group=mesh["pp"].get_group())
            for m, s in zip(self.modules, stage_ids, strict=True)
        ]
        self.has_first, self.has_last = 0 in stage_ids, n_stages - 1 in stage_ids
        self.schedule = (
            Schedule1F1B(stages[0], n_microbatches=self.grad_accum, loss_fn=lm_loss)
            if c.vpp == 1
            else ScheduleInterleaved1F1B(stages, n_microbatches=self.grad_accum, loss_fn=lm_loss)
        )

    def _data_parallel(self, module: nn.Module, mesh: DeviceMesh, c: TrainConfig) -> nn.Module:
        if c.zero <= 1:
            return DistributedDataParallel(
                module,
                process_group=mesh.get_group(),
                bucket_cap_mb=c.ddp_bucket_mb,
                gradient_as_bucket_view=True,
            )
        policy = (
            MixedPrecisionPolicy(param_dtype=self.low_precision, reduce_dtype=torch.float32)
            if self.low_precision
            else MixedPrecisionPolicy()
        )
        reshard = c.zero == 3
        for block in cast(Decoder, module).blocks.values():
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
        sharded = fully_shard(module, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
        return cast(nn.Module, sharded)

    def _autocast(self) -> contextlib.AbstractContextManager[None]:
        if self.low_precision is None or self.config.zero >= 2:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.low_precision)

    def step(self, observe: Callable[[], None] | None = None) -> None:
        with self._autocast():
            if self.schedule is not None:
                self._pipeline_step()
                if observe is not None:
                    observe()
            else:
                self._accumulate(observe)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _accumulate(self, observe: Callable[[], None] | None) -> None:
        model = self.modules[0]
        for micro in range(self.grad_accum):
            last = micro == self.grad_accum - 1
            tokens, labels = self.batch
            with (
                _gradient_sync(model, last or self.config.zero >= 2),
                self._context_parallel(tokens, labels) as (tokens, labels),
            ):
                loss = lm_loss(model(tokens), labels) / self.grad_accum
                if observe is not None and last:
                    observe()  # FSDP2 with reshard_after_forward=False holds full params here
                loss.backward()
            if observe is not None:
                observe()

    @contextlib.contextmanager
    def _context_parallel(
        self, tokens: torch.Tensor, labels: torch.Tensor
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's share of the micro-batch's sequence, with SDPA made ring attention over
        the cp ranks for its forward and backward (torchtitan's train context); the batch
        itself stays whole."""
        if self.cp_mesh is None:
            yield tokens, labels
            return
        tokens, labels = tokens.clone(), labels.clone()  # sharded in place
        with context_parallel(
            self.cp_mesh,
            buffers=[tokens, labels],
            buffer_seq_dims=[1, 1],
            no_restore_buffers={tokens, labels},
        ):
            yield tokens, labels

    def _pipeline_step(self) -> None:
        tokens, labels = (t.repeat(self.grad_accum, 1) for t in self.batch)
        assert self.schedule is not None
        args = (tokens,) if self.has_first else ()
        kwargs: dict[str, Any] = {"target": labels} if self.has_last else {}
        self.schedule.step(*args, **kwargs)

    def model_state(self) -> measure.StateTally:
        tally = measure.StateTally()
        for module in self.modules:
            for p in module.parameters():
                tally.add("params", p)
                tally.add("grads", p.grad)
        inner = (
            self.optimizer.optim
            if isinstance(self.optimizer, ZeroRedundancyOptimizer)
            else self.optimizer
        )
        # FSDP2 swaps unsharded tensors into the modules between forward and backward; the
        # optimizer keeps the sharded parameters (and their gradients) in view.
        tally.add_optimizer(inner, params_kind="params")
        return tally


def refuse_context_parallel_off_cuda(c: TrainConfig, device: torch.device) -> None:
    """The rule torch_cp_needs_cuda, where a trial reaches a rank anyway (a trial.json)."""
    if c.cp > 1 and device.type != "cuda":
        raise RuntimeError(
            f"cp={c.cp}: torch's context parallelism runs ring attention on CUDA's SDPA "
            f"kernels, and this rank runs on {device.type}"
        )


@contextlib.contextmanager
def _gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """DDP: reduce only on the last micro-batch (no_sync). FSDP2 (ZeRO-2/3) reduce-scatters
    every micro-batch, so that only gradient shards are ever held."""
    if isinstance(model, DistributedDataParallel) and not enabled:
        with model.no_sync():
            yield
        return
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(enabled)
    yield


def tensor_parallel(model: Decoder, mesh: DeviceMesh, sp: bool) -> None:
    """Megatron-style TP with DTensor: column-parallel in, row-parallel out; with sequence
    parallelism the norms and residual stream are split along the sequence."""
    between = Shard(1) if sp else Replicate()
    if model.embed is not None:
        parallelize_module(
            model.embed,
            mesh,
            {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=between)},
        )
    for block in model.blocks.values():
        plan: dict[str, ParallelStyle] = {
            "attn.q": ColwiseParallel(),
            "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(output_layouts=between),
            "mlp.up": ColwiseParallel(),
            "mlp.down": RowwiseParallel(output_layouts=between),
        }
        if cast(Any, block).mlp.gate is not None:
            plan["mlp.gate"] = ColwiseParallel()
        if sp:
            gather = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
            plan.update(
                {
                    "attn_norm": SequenceParallel(),
                    "mlp_norm": SequenceParallel(),
                    "attn": gather,
                    "mlp": gather,
                }
            )
        parallelize_module(block, mesh, plan)
    if model.head is not None:
        plan = {"out": ColwiseParallel(input_layouts=between, output_layouts=Replicate())}
        if sp:
            plan["norm"] = SequenceParallel()
        parallelize_module(model.head, mesh, plan)


SESSION = TorchSession
"""What a warm pool (`rank/warm_pool.py`) builds for each trial."""


def main(args: list[str], started: float) -> None:
    harness.main(SESSION, args, started)
