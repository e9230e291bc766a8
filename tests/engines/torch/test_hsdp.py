"""Hybrid sharding (torch FSDP2 over a replicate x shard mesh) in the model: what a user
trades, memory for collectives that span fewer nodes."""

from autotune.engines import get_engine
from autotune.estimate.predict import Estimate, estimate
from autotune.problem import load_problem
from autotune.space import TrainConfig


def test_hsdp_shortens_the_sharded_collectives_and_pays_in_memory() -> None:
    problem = load_problem("torch", "llama3-8b", "dgx-h100:16")  # 16 nodes of 8
    assert problem.space.values["hsdp"] == (1, 2, 4, 8, 16)  # replicas of whole nodes

    def predicted(hsdp: int) -> Estimate:
        config = TrainConfig(dp=128, zero=3, hsdp=hsdp, mbs=1, recompute="full")
        return estimate(problem.workload, config, problem.cluster, get_engine("torch").traits)

    flat, hybrid = predicted(1), predicted(4)
    # Each replica shards over 32 ranks instead of 128: four times the sharded optimizer.
    assert hybrid.memory.optimizer == 4 * flat.memory.optimizer
    # Gathers and reduce-scatters over 4 nodes, each shard's all-reduce over 4 replicas:
    # rings a quarter as long as one over all 16 nodes.
    assert hybrid.step.dp_comm_s < 0.6 * flat.step.dp_comm_s
