"""DeepSpeed worker: `deepspeed.initialize` on the decoder, or a PipelineModule when pp > 1."""

from __future__ import annotations

import itertools  # noqa: E402
import json  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.pipe import LayerSpec, PipelineModule  # noqa: E402
from deepspeed.runtime.pipe.schedule import BackwardPass  # noqa: E402

from autotune.engines import measure, worker  # first: it notes the start time before heavy imports
from autotune.engines.deepspeed import DS_CONFIG_FILE  # noqa: E402
from autotune.engines.model import Block, Decoder, Embedding, Head, lm_loss, synthetic_batch  # noqa: E402
from autotune.trial.spec import TrialSpec  # noqa: E402


class DeepSpeedSession:
    def __init__(self, spec: TrialSpec, folder: Path) -> None:
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
            model = Decoder(w, c.recompute)
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
"""What a warm pool (`engines/pool_worker.py`) builds for each trial."""

if __name__ == "__main__":
    worker.main(SESSION)
