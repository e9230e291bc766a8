"""megatron-core config objects of the tuned config; pass them to GPTModel,
DistributedDataParallel and get_megatron_optimizer in your training script.
Under bf16 or fp16, wrap each GPTModel in
megatron.core.transformer.module.Float16Module(transformer_config, model) before
DistributedDataParallel, as Megatron-LM's get_model does: the measured trials did.
Tensor-parallel overlap: before building the model, call Transformer
Engine's initialize_ub(shape=[seq_length * micro_batch_size // cp,
hidden_size], tp_size=4, ...) as Megatron-LM's
_initialize_tp_communicators does, with CUDA_DEVICE_MAX_CONNECTIONS=1
(and UB_SKIPMC=1 on GPUs before Hopper, which lack CUDA multicast).
"""

import torch
import torch.nn.functional as F
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.optimizer import OptimizerConfig
from megatron.core.transformer.transformer_config import TransformerConfig

transformer_config = TransformerConfig(
    num_layers=80,
    hidden_size=8192,
    ffn_hidden_size=28672,
    num_attention_heads=64,
    num_query_groups=8,
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
    tensor_model_parallel_size=4,
    pipeline_model_parallel_size=4,
    virtual_pipeline_model_parallel_size=5,
    overlap_p2p_comm=True,
    batch_p2p_comm=False,
    sequence_parallel=True,
    tp_comm_overlap=True,
    recompute_granularity=None,
    recompute_method=None,
    recompute_num_layers=None,
    deallocate_pipeline_outputs=True,
)
ddp_config = DistributedDataParallelConfig(
    grad_reduce_in_fp32=True,
    overlap_grad_reduce=True,
    overlap_param_gather=True,
    use_distributed_optimizer=True,
    bucket_size=41943040,
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
    vocab_size=128256,
    max_sequence_length=8192,
    position_embedding_type='rope',
    share_embeddings_and_output_weights=False,
)
num_microbatches = 64
