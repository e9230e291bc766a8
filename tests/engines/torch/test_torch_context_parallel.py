"""The torch engine's context parallelism: searched where CUDA runs it, refused where not."""

import dataclasses

import pytest
import torch

from autotune.engines import get_engine
from autotune.engines.torch.exports import parallel_settings
from autotune.engines.torch.worker import refuse_context_parallel_off_cuda
from autotune.estimate.predict import estimate
from autotune.problem import load_problem
from autotune.rank.model import Attention
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.trial.spec import TrialSpec
from tests.paths import REPO

WITH_CP = str(REPO / "scripts" / "spaces" / "torch_cp.yaml")


def test_a_space_that_lists_cp_searches_it_on_gpus_and_cpu_hosts_do_not() -> None:
    """Llama 3 8B's 8,192 tokens on 8 H100s in the space with cp: plans with cp 2 beside
    FSDP2, where the default space (torch's context_parallel is a prototype) has none. The
    same model on gloo ranks: none (torch_cp_needs_cuda)."""
    assert load_problem("torch", "llama3-8b", "dgx-h100:1", None).space.values["cp"] == (1,)
    gpus = load_problem("torch", "llama3-8b", "dgx-h100:1", WITH_CP)
    assert 2 in gpus.space.values["cp"]
    valid = gpus.enumerate().require_some().valid
    with_cp = [c for c in valid.configs if c.cp > 1]
    assert with_cp and all(c.zero >= 2 and c.tp == c.pp == 1 for c in with_cp)
    cpus = load_problem("torch", "llama3-8b", "local:8", WITH_CP)
    assert all(c.cp == 1 for c in cpus.enumerate().require_some().valid.configs)


def test_a_rank_off_cuda_refuses_cp_in_one_line() -> None:
    refuse_context_parallel_off_cuda(TrainConfig(dp=2), torch.device("cpu"))
    with pytest.raises(RuntimeError, match="cp=2: torch's context parallelism") as refused:
        refuse_context_parallel_off_cuda(TrainConfig(cp=2, zero=3), torch.device("cpu"))
    assert "\n" not in str(refused.value)


def test_the_exported_plan_shards_over_dp_and_cp() -> None:
    spec = TrialSpec(
        workload=load_workload("llama3-8b"),
        cluster=load_cluster("dgx-h100:1"),
        config=TrainConfig(cp=2, dp=4, zero=3),
        engine="torch",
    )
    settings = parallel_settings(spec)
    assert settings["mesh"] == {"dp": 4, "cp": 2}
    assert "flattened (dp, cp)" in str(settings["data_parallel"])
    assert settings["context_parallel"] == {
        "degree": 2,
        "buffers": "tokens and labels, seq dim 1",
    }


def test_repeated_key_value_heads_attend_as_grouped_query_attention() -> None:
    """Ring attention takes as many key as query heads: repeating them changes nothing."""
    w = dataclasses.replace(load_workload("tiny"), seq_length=16)
    torch.manual_seed(0)
    grouped = Attention(w, selective_recompute=False)
    repeated = Attention(w, selective_recompute=False)
    repeated.load_state_dict(grouped.state_dict())
    repeated.repeat_kv = True
    x = torch.randn(2, 16, w.hidden_size)
    assert w.num_query_groups < w.num_attention_heads
    torch.testing.assert_close(repeated(x), grouped(x))


def test_torch_waits_on_its_gathered_keys_and_values_where_megatron_hides_its_ring() -> None:
    """Llama 3 8B with cp 2 on 8 H100s: Transformer Engine passes the 8 key/value heads around
    a ring behind attention; torch's context_parallel all-gathers them repeated to the 32
    query heads before attention, so its step waits on them."""
    w, cluster = load_workload("llama3-8b"), load_cluster("dgx-h100:1")
    torch_step = estimate(
        w, TrainConfig(cp=2, dp=4, zero=3), cluster, get_engine("torch").traits
    ).step
    megatron_step = estimate(
        w, TrainConfig(cp=2, dp=4, zero=1), cluster, get_engine("megatron").traits
    ).step
    assert megatron_step.cp_comm_s == 0.0 < torch_step.cp_comm_s
