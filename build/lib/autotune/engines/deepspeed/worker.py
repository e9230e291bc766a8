"""DeepSpeed worker: `deepspeed.initialize` on the decoder, or a PipelineModule when pp > 1;
a mixture of experts through DeepSpeed-MoE's layer, its experts split over `ep` ranks."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deepspeed
import torch
from deepspeed.moe.layer import MoE
from deepspeed.pipe import LayerSpec, PipelineModule
from deepspeed.runtime.pipe.schedule import BackwardPass

from autotune.engines.deepspeed.engine import DS_CONFIG_FILE
from autotune.rank import harness, measure
from autotune.rank.model import (
    MLP,
    Block,
    Decoder,
    Embedding,
    Head,
    MlpOf,
    lm_loss,
    synthetic_batch,
)
from autotune.specs import Workload
from autotune.trial.spec import TrialSpec


class ExpertLayer(torch.nn.Module):
    """A mixture-of-experts MLP as DeepSpeed-MoE builds it: `deepspeed.moe.layer.MoE` over
    the workload's routed experts (each an MLP of the expert width), plain top-k routing that
    drops no token, the experts split over `ep` ranks; plus the shared expert where the
    workload has one. The router's balancing loss is left out of the training loss: it costs a
    reduction, not a GEMM."""

    def __init__(self, w: Workload, ep: int) -> None:
        super().__init__()
        self.routed = MoE(
            w.hidden_size,
            MLP(w, w.expert_ffn_size),
            num_experts=w.num_moe_experts,
            ep_size=ep,
            k=w.moe_router_topk,
            drop_tokens=False,
            top2_2nd_expert_sampling=False,  # a plain top-k, as Mixtral and Megatron route
        )
        shared = w.moe_shared_expert_intermediate_size
        self.shared = MLP(w, shared) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _balancing_loss, _counts = self.routed(x)
        return out if self.shared is None else out + self.shared(x)


def mlp_of(w: Workload, ep: int) -> MlpOf | None:
    """Every `moe_layer_freq`-th layer an `ExpertLayer` (Megatron's placement), the others
    dense; None for a dense workload."""
    if not w.is_moe:
        return None
    return lambda layer: ExpertLayer(w, ep) if layer % w.moe_layer_freq == 0 else MLP(w)


GROUP_MAPS = (
    "_EXPERT_PARALLEL_GROUP",
    "_EXPERT_PARALLEL_GROUP_RANKS",
    "_EXPERT_DATA_PARALLEL_GROUP",
    "_EXPERT_DATA_PARALLEL_GROUP_RANKS",
    "_ALL_TO_ALL_GROUP",
)
GROUP_VALUES = (
    "_WORLD_GROUP",
    "_ZERO_PARAM_INTRA_PARALLEL_GROUP",
    "_TENSOR_MODEL_PARALLEL_GROUP",
    "_MODEL_PARALLEL_GROUP",
    "_DATA_PARALLEL_GROUP",
    "_MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE",
    "_MPU_TENSOR_MODEL_PARALLEL_RANK",
    "mpu",
)
"""`deepspeed.utils.groups`' globals that hold the groups DeepSpeed made: dicts, and values
that start as None."""


def forget_groups() -> None:
    """DeepSpeed keeps the groups it made (its clone of the world, expert and ZeRO groups) in
    module globals and hands them to the next engine; a warm pool destroys a trial's groups
    after it, so the next trial starts from none, as a fresh launch does."""
    groups = deepspeed.utils.groups
    for name in GROUP_MAPS:
        setattr(groups, name, {})
    for name in GROUP_VALUES:
        setattr(groups, name, None)
    groups.expert_tensor_parallel_world_size = 1


class DeepSpeedSession:
    def __init__(self, spec: TrialSpec, folder: Path) -> None:
        forget_groups()
        deepspeed.init_distributed(dist_backend=spec.cluster.backend)
        w, c = spec.workload, spec.config
        config = json.loads((folder / DS_CONFIG_FILE).read_text())
        self.grad_accum = c.grad_accum(w.global_batch_size)
        self.pipelined = c.pp > 1
        if self.pipelined:
            layers = [LayerSpec(Embedding, w)]
            layers += [LayerSpec(Block, w, c.recompute) for _ in range(w.num_layers)]
            layers.append(LayerSpec(Head, w))
            model: torch.nn.Module = PipelineModule(
                layers=layers, num_stages=c.pp, loss_fn=lm_loss, partition_method="type:Block"
            )
        else:
            model = Decoder(w, c.recompute, mlp_of=mlp_of(w, c.ep))
        # With MoE layers, DeepSpeed splits these into its expert and dense optimizer groups
        # itself (its optimizer is the ds_config's), so ZeRO shards each over its own group.
        self.engine, *_ = deepspeed.initialize(
            model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=config,
        )
        self.device = torch.device(self.engine.device)
        tokens, labels = synthetic_batch(w, c.mbs, seed=0)
        self.batch = (tokens.to(self.device), labels.to(self.device))

    def step(self, observe: Callable[[], None] | None = None) -> None:
        if self.pipelined:
            self._pipeline_step(observe)
            return
        for _ in range(self.grad_accum):
            loss = lm_loss(self.engine(self.batch[0]), self.batch[1])
            self.engine.backward(loss)
            if observe is not None:
                observe()
            self.engine.step()

    def _pipeline_step(self, observe: Callable[[], None] | None) -> None:
        if observe is None:
            self.engine.train_batch(data_iter=itertools.repeat(self.batch))
            return
        # The pipeline engine runs its whole schedule inside train_batch and dispatches
        # through a class-level instruction map: observe after each backward pass (before
        # ReduceGrads partitions ZeRO-1's gradients) by hooking this instance's map.
        original = self.engine._INSTRUCTION_MAP
        backward = original[BackwardPass]

        def observed_backward(engine: Any, *args: Any, **kwargs: Any) -> Any:
            done = backward(engine, *args, **kwargs)
            observe()
            return done

        self.engine._INSTRUCTION_MAP = {**original, BackwardPass: observed_backward}
        try:
            self.engine.train_batch(data_iter=itertools.repeat(self.batch))
        finally:
            del self.engine._INSTRUCTION_MAP  # back to the class attribute

    def model_state(self) -> measure.StateTally:
        return model_state(self.engine)


def model_state(engine: deepspeed.DeepSpeedEngine) -> measure.StateTally:
    """Parameters, gradients and optimizer states an engine's rank holds now, ZeRO partitions
    (`ds_tensor`) and fp32 masters included."""
    tally = measure.StateTally()
    optimizer = engine.optimizer
    for p in engine.module.parameters():
        tally.add("params", getattr(p, "ds_tensor", None) if hasattr(p, "ds_tensor") else p.data)
        tally.add("grads", p.grad)
    for grads in getattr(optimizer, "averaged_gradients", {}).values():
        for g in grads or ():
            tally.add("grads", g)
    tally.add_optimizer(getattr(optimizer, "optimizer", optimizer), params_kind="optimizer")
    return tally


SESSION = DeepSpeedSession
"""What a warm pool (`rank/warm_pool.py`) builds for each trial."""


def main(args: list[str], started: float) -> None:
    harness.main(SESSION, args, started)
