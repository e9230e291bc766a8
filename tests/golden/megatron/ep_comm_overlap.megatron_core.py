"""megatron-core config objects of the tuned config; pass them to GPTModel,
DistributedDataParallel and get_megatron_optimizer in your training script.
Under bf16 or fp16, wrap each GPTModel in
megatron.core.transformer.module.Float16Module(transformer_config, model) before
DistributedDataParallel, as Megatron-LM's get_model does: the measured trials did.
"""

import torch
import torch.nn.functional as F
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.transformer_config import TransformerConfig

transformer_config = TransformerConfig(
    num_layers=48,
    hidden_size=2048,
    ffn_hidden_size=6144,
    num_attention_heads=32,
    num_query_groups=4,
    kv_channels=128,
    num_moe_experts=128,
    moe_router_topk=8,
    moe_ffn_hidden_size=768,
    moe_layer_freq=1,
    moe_token_dispatcher_type='alltoall',
    overlap_moe_expert_parallel_comm=True,
    moe_grouped_gemm=True,
    expert_model_parallel_size=16,
    expert_tensor_parallel_size=1,
    normalization='RMSNorm',
    add_bias_linear=False,
    gated_linear_unit=True,
    activation_func=F.silu,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    bf16=True,
    fp16=False,
    params_dtype=torch.bfloat16,
    pipeline_dtype=torch.bfloat16,
    tensor_model_parallel_size=1,
    pipeline_model_parallel_size=1,
    virtual_pipeline_model_parallel_size=None,
    sequence_parallel=False,
    recompute_granularity=None,
    recompute_method=None,
    recompute_num_layers=None,
    deallocate_pipeline_outputs=True,
)
ddp_config = DistributedDataParallelConfig(
    grad_reduce_in_fp32=True,
    overlap_grad_reduce=True,
    overlap_param_gather=False,
    use_distributed_optimizer=True,
    bucket_size=6553600,
)
optimizer_config = OptimizerConfig(
    optimizer='adam',
    lr=0.0001,
    weight_decay=0.01,
    clip_grad=1.0,
    bf16=True,
    fp16=False,
    params_dtype=torch.bfloat16,
    use_distributed_optimizer=True,
)
gpt_model_kwargs = dict(
    vocab_size=151936,
    max_sequence_length=4096,
    position_embedding_type='rope',
    share_embeddings_and_output_weights=False,
)
num_microbatches = 32
