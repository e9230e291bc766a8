"""Every file `autotune export` writes for the built-in engines, and the slurm launcher's step
script, against golden files: a change to what production training runs shows up in review.
AUTOTUNE_UPDATE_GOLDEN=1 rewrites them (then read the diff)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engines import ENGINES, get_engine
from autotune.export.scripts import nccl_env_text, train_script
from autotune.launchers import LaunchRequest, torchrun
from autotune.launchers.slurm_scripts import step_script
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.trial.spec import TrialSpec, nccl_environment
from tests.engines.megatron.test_megatron import best_trial, check_golden
from tests.fakes import sbatch_text
from tests.paths import TESTS

GOLDEN = TESTS / "golden" / "exports"
CONFIGS = {
    "deepspeed": TrainConfig(
        dp=16, zero=2, mbs=2, overlap_comm=True, reduce_bucket=200_000_000, nccl_algo="Ring"
    ),
    "torch": TrainConfig(tp=2, dp=8, zero=3, mbs=4, recompute="full", nccl_proto="Simple"),
    "megatron": TrainConfig(
        tp=4, pp=2, dp=2, sp=True, zero=1, mbs=1, overlap_comm=True, tp_comm_overlap=True
    ),
}


@pytest.mark.parametrize("engine_name", ENGINES)
def test_every_export_matches_its_golden_file(engine_name: str, tmp_path: Path) -> None:
    """Two nodes, so train.sh carries the rendezvous; a measured winner with an NCCL choice."""
    engine = get_engine(engine_name)
    spec = TrialSpec(
        engine=engine_name,
        workload=load_workload("llama3-8b"),
        cluster=load_cluster("dgx-h100:2"),
        config=CONFIGS[engine_name],
    )
    trial = best_trial(54321.0, "measured")
    folder = GOLDEN / engine_name
    files = engine.write_files(spec, tmp_path)
    assert files, f"{engine_name} wrote no config file"
    for path in files:
        check_golden(path.name, path.read_text(), folder)
    note = "NCCL_ALGO=Ring measured 4% faster than NCCL's own choice"
    check_golden("nccl.env", nccl_env_text(nccl_environment(spec), spec, trial, note), folder)
    check_golden("train.sh", train_script(engine, spec, trial, "golden", files[0].name), folder)
    check_golden("train.sbatch", sbatch_text(spec, trial, "golden"), folder)


def test_slurm_step_script_matches_its_golden_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torchrun, "executable", lambda: "torchrun")  # not this machine's path
    request = LaunchRequest(
        folder=Path("/trials/7"),
        worker_module="autotune.engines.torch.worker",
        nprocs_per_node=8,
        nnodes=2,
        env={"OMP_NUM_THREADS": "1", "NCCL_ALGO": "Ring"},
    )
    check_golden("slurm_step.sh", step_script(request), GOLDEN)


def test_a_deepspeed_mixture_of_experts_export_says_its_expert_parallelism(
    tmp_path: Path,
) -> None:
    """Mixtral on 16 GPUs with its experts over 8: DeepSpeed has no ds_config key for expert
    parallelism (it is `ep_size` of each MoE layer), so train.sh says it."""
    engine = get_engine("deepspeed")
    spec = TrialSpec(
        engine="deepspeed",
        workload=load_workload("mixtral-8x7b"),
        cluster=load_cluster("dgx-h100:2"),
        config=TrainConfig(dp=16, ep=8, zero=2, mbs=1, overlap_comm=True),
    )
    folder = GOLDEN / "deepspeed_moe"
    files = engine.write_files(spec, tmp_path)
    for path in files:
        check_golden(path.name, path.read_text(), folder)
    trial = best_trial(12345.0, "measured")
    script = train_script(engine, spec, trial, "golden", files[0].name)
    check_golden("train.sh", script, folder)
    assert "num_experts=8, ep_size=8, k=2, drop_tokens=False" in script


def test_best_yaml_matches_its_golden_file(tmp_path: Path) -> None:
    """best.yaml of a measured winner, its provenance (date, host, versions) aside: a
    `summary:` in human units first, the exact machine values after it."""
    import yaml

    from autotune.export.best import export_best
    from autotune.problem import load_problem
    from autotune.space import TrainConfig
    from autotune.study.record.storage import problem_attrs
    from tests.fakes import add_measured, new_study

    study = new_study(between=0.05)
    for key, value in problem_attrs(load_problem("deepspeed", "tiny", "local:2")).items():
        study.set_user_attr(key, value)
    best = TrainConfig(dp=2, zero=2, mbs=4, reduce_bucket=50_000_000)
    first = add_measured(study, 120.0, best, label=True)
    add_measured(study, 100.0, TrainConfig(dp=2, mbs=2), label=True)
    memory = {"peak_memory_bytes": 466_059_123}
    for value in (110.0, 112.0):
        add_measured(study, value, best, label=True, confirms=first, after_choice=True, **memory)
    export_best(study, tmp_path / "best")
    exported = yaml.safe_load((tmp_path / "best" / "best.yaml").read_text())
    del exported["provenance"]
    check_golden("best.yaml", yaml.safe_dump(exported, sort_keys=False), GOLDEN / "deepspeed")
