"""Run by torchrun on gloo: builds the megatron worker's GPTModel chunks for tp=2, pp=2 on
CPU and runs the forward and backward pass megatron-core allows there without its schedules.

Its attention (a global memory buffer), rotary embeddings and recomputation RNG tracker
allocate on CUDA, so each layer runs its MLP path only: the input embedding, every layer's
norm and tensor-parallel MLP, the final norm, the vocab-parallel output layer and
cross-entropy, with the activations and their gradients sent between pipeline stages as
Megatron's schedules send them. Writes what each rank saw to <out>/rank<N>.json.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from megatron.core import parallel_state, tensor_parallel

from autotune.engines.megatron.worker import build_chunks, init_model_parallel
from autotune.rank.model import synthetic_batch
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.trial.spec import TrialSpec


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    workload = dataclasses.replace(load_workload("tiny"), precision="fp32")
    config = TrainConfig(tp=2, pp=2, dp=1, mbs=2)
    spec = TrialSpec(
        engine="megatron", workload=workload, cluster=load_cluster("local:4"), config=config
    )
    init_model_parallel(config)
    (model,) = build_chunks(spec, on_cpu=True)
    first, last = model.pre_process, model.post_process
    tokens, labels = synthetic_batch(workload, config.mbs, seed=0)
    pp_group = parallel_state.get_pipeline_model_parallel_group()
    peer = parallel_state.get_pipeline_model_parallel_next_rank() if first else None
    shape = (workload.seq_length, config.mbs, workload.hidden_size)  # Megatron's [s, b, h]

    if first:
        x = model.embedding(input_ids=tokens, position_ids=None)
    else:
        x = torch.empty(shape)
        dist.recv(x, src=parallel_state.get_pipeline_model_parallel_prev_rank(), group=pp_group)
        x.requires_grad_(True)
    stage_input = x
    for layer in model.decoder.layers:
        mlp_out, _bias = layer.mlp(layer.pre_mlp_layernorm(x))
        x = x + mlp_out
    report: dict[str, object] = {
        "rank": rank,
        "first": first,
        "last": last,
        "tp_rank": parallel_state.get_tensor_model_parallel_rank(),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if last:
        logits, _ = model.output_layer(model.decoder.final_layernorm(x))
        losses = tensor_parallel.vocab_parallel_cross_entropy(
            logits.float(), labels.transpose(0, 1).contiguous()
        )
        loss = losses.mean()
        loss.backward()
        report["loss"] = loss.item()
        dist.send(
            stage_input.grad,
            dst=parallel_state.get_pipeline_model_parallel_prev_rank(),
            group=pp_group,
        )
    else:
        dist.send(x.detach(), dst=peer, group=pp_group)
        grad = torch.empty(shape)
        dist.recv(grad, src=peer, group=pp_group)
        x.backward(grad)
    attention = [n for n, _ in model.named_parameters() if "self_attention" in n]
    report["params_without_grad"] = sorted(
        n
        for n, p in model.named_parameters()
        if n not in attention and (p.grad is None or not p.grad.abs().sum() > 0)
    )
    try:
        layer = model.decoder.layers[0]
        layer.self_attention(layer.input_layernorm(x.detach()), attention_mask=None)
        report["attention"] = "ran"
    except (AssertionError, RuntimeError) as exc:  # CPU torch: "not compiled with CUDA"
        report["attention"] = f"{type(exc).__name__}: {exc}"
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
