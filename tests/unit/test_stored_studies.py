"""Studies stored before a change still resume: their configs keep their keys, and their
cluster record still matches the cluster it was made for."""

import json
from pathlib import Path

import optuna

from autotune.problem import load_problem
from autotune.space import TrainConfig, config_key
from autotune.study.storage import StudyRef, open_study, problem_attrs

# A key as studies stored it before context parallelism was a knob.
STORED_KEY = (
    '{"allgather_bucket": 500000000, "ddp_bucket_mb": 25, "dp": 8, "mbs": 2, '
    '"nccl_algo": "default", "nccl_proto": "default", "overlap_comm": false, '
    '"overlap_param_gather": false, "pp": 1, "recompute": "full", "recompute_method": "block", '
    '"recompute_num_layers": 2, "reduce_bucket": 500000000, "sp": false, "tp": 2, "vpp": 1, '
    '"zero": 1}'
)


def test_a_config_stored_before_cp_keeps_its_key() -> None:
    config = TrainConfig(**json.loads(STORED_KEY))
    assert config_key(config) == STORED_KEY
    assert '"cp": 2' in config_key(TrainConfig(**json.loads(STORED_KEY), cp=2))


def test_a_study_stored_before_nvlink_domains_resumes(tmp_path: Path) -> None:
    problem = load_problem("megatron", "llama3-8b", "dgx-h100:2")
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    old = optuna.create_study(study_name="old", storage=storage, direction="maximize")
    for key, value in problem_attrs(problem).items():
        if key == "cluster":
            value = {k: v for k, v in value.items() if k != "nvlink_domain"}
        old.set_user_attr(key, value)
    ref = StudyRef(name="old", storage_url=storage, folder=tmp_path)
    assert open_study(ref, problem, optuna.samplers.RandomSampler()).study_name == "old"
