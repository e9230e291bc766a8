"""The user's own DeepSpeed command: how it is read, and the ds_config each trial gets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autotune.engines.command import parse_job
from autotune.engines.deepspeed.jobs import (
    ds_precision,
    export_argv,
    global_batch,
    trial_ds_config,
    users_knobs,
)
from autotune.errors import InputError
from autotune.export.scripts import job_command
from autotune.problem import load_problem
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.trial.spec import TrialSpec, UserJob
from tests.conftest import autotune

USER_CONFIG = {
    "train_batch_size": 32,
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": 8,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95]}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 1000}},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "ds.json").write_text(json.dumps(USER_CONFIG))
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "config_argument"),
    [
        (["train.py", "--deepspeed_config", "ds.json", "--lr", "1"], "ds.json"),
        (["python", "train.py", "--deepspeed_config=ds.json"], "--deepspeed_config=ds.json"),
        (["train.py", "--deepspeed", "--deepspeed_config", "ds.json"], "ds.json"),  # a switch
        (["train.py", "--deepscale_config", "ds.json"], "ds.json"),  # DeepSpeed's old name
        (["train.py", "--deepscale_config=ds.json"], "--deepscale_config=ds.json"),
        (["train.py", "--output_dir", "out", "--deepspeed", "ds.json"], "ds.json"),  # HF
    ],
)
def test_the_config_argument_is_found_in_each_form(
    workdir: Path, argv: list[str], config_argument: str
) -> None:
    job = parse_job(argv, workdir, "deepspeed")
    assert job.command[0] == "train.py"  # `python` is the launcher's to add
    assert job.command[job.config_index] == config_argument
    assert job.base_config == USER_CONFIG
    replaced = job.argv_with_config("/trial/ds_config.json")
    assert replaced[job.config_index].endswith("/trial/ds_config.json")
    flag = config_argument.partition("=")[0] + "="  # `--flag=FILE` keeps its flag as given
    assert replaced[job.config_index].startswith(flag) == ("=" in config_argument)
    assert [a for i, a in enumerate(replaced) if i != job.config_index] == [
        a for i, a in enumerate(job.command) if i != job.config_index
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["deepspeed", "train.py", "--deepspeed_config", "ds.json"], "starts the ranks itself"),
        (["torchrun", "--nproc-per-node", "8", "train.py"], "starts the ranks itself"),
        (["nope.py", "--deepspeed_config", "ds.json"], "'nope.py' does not exist"),
        (["train.py", "--lr", "1"], "names no DeepSpeed config"),
        (["train.py", "--deepspeed"], "names no DeepSpeed config"),
        (["train.py", "--deepspeed_config", "missing.json"], "missing.json"),
        (["train.py", "--deepspeed_config", "train.py"], "not JSON"),
        (["-m"], "name the module"),
        (["python3", "-u", "train.py", "--deepspeed_config", "ds.json"], "interpreter option"),
    ],
)
def test_commands_that_cannot_be_tuned_are_refused(
    workdir: Path, argv: list[str], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        parse_job(argv, workdir, "deepspeed")


def test_only_an_interpreter_word_is_dropped(workdir: Path) -> None:
    (workdir / "python_train.py").write_text("")
    argv = ["python_train.py", "--deepspeed_config", "ds.json"]
    assert parse_job(argv, workdir, "deepspeed").command[0] == "python_train.py"
    assert parse_job(["python3.11", *argv], workdir, "deepspeed").command[0] == "python_train.py"


def test_a_trial_config_keeps_the_users_settings_and_global_batch(workdir: Path) -> None:
    job = parse_job(["train.py", "--deepspeed_config", "ds.json"], workdir, "deepspeed")
    workload = dataclasses.replace(load_workload("tiny"), global_batch_size=32)
    config = TrainConfig(dp=4, zero=1, mbs=2, overlap_comm=True, offload_optimizer=True)
    merged = trial_ds_config(job, workload, config)
    assert merged["optimizer"] == USER_CONFIG["optimizer"]
    assert merged["scheduler"] == USER_CONFIG["scheduler"]
    assert merged["bf16"] == {"enabled": "auto"}  # left for Hugging Face to resolve
    assert merged["train_micro_batch_size_per_gpu"] == 2
    assert "gradient_accumulation_steps" not in merged  # DeepSpeed derives 4 = 32 / (2 x dp 4)
    assert merged["train_batch_size"] == 32
    zero = merged["zero_optimization"]
    assert zero["stage"] == 1 and zero["overlap_comm"] is True
    assert zero["offload_optimizer"] == {"device": "cpu"}
    assert USER_CONFIG["zero_optimization"]["stage"] == 3  # the user's dict is untouched
    stage3 = trial_ds_config(job, workload, TrainConfig(dp=4, zero=3, mbs=8))
    assert "allgather_bucket_size" not in stage3["zero_optimization"]
    assert "offload_optimizer" not in stage3["zero_optimization"]  # the trial's: no offload


def test_the_global_batch_comes_from_the_users_config(workdir: Path) -> None:
    def batch(config: dict[str, object], *flags: str) -> int:
        (workdir / "ds.json").write_text(json.dumps(config))
        job = parse_job(["train.py", *flags, "--deepspeed", "ds.json"], workdir, "deepspeed")
        return global_batch(job, world_size=8)

    assert batch({"train_batch_size": 64}) == 64
    assert batch({"train_micro_batch_size_per_gpu": 2}) == 16
    assert batch({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}) == 64
    # Hugging Face: "auto" in the file, the Trainer's flags (default 8 x 1) decide
    assert batch({"train_batch_size": "auto"}) == 64
    assert batch({}, "--per_device_train_batch_size", "2", "--gradient_accumulation_steps=3") == 48
    with pytest.raises(InputError, match="sets no global batch"):
        (workdir / "ds.json").write_text(json.dumps({"train_batch_size": "auto"}))
        global_batch(
            parse_job(["train.py", "--deepspeed_config", "ds.json"], workdir, "deepspeed"), 8
        )


def test_hugging_face_batch_flags_follow_the_trial(workdir: Path) -> None:
    command = ["train.py", "--per_device_train_batch_size", "8", "--deepspeed", "ds.json"]
    job = parse_job(command, workdir, "deepspeed")
    workload = dataclasses.replace(load_workload("tiny"), global_batch_size=32)
    spec = TrialSpec(
        engine="deepspeed",
        workload=workload,
        cluster=load_cluster("local:2"),
        config=TrainConfig(dp=2, mbs=4),
        job=job,
    )
    argv = export_argv(spec, "/t/ds_config.json")
    assert argv == [
        "train.py",
        "--per_device_train_batch_size",
        "4",
        "--deepspeed",
        "/t/ds_config.json",
        "--gradient_accumulation_steps",
        "4",
    ]
    plain = parse_job(["train.py", "--deepspeed_config", "ds.json"], workdir, "deepspeed")
    assert export_argv(dataclasses.replace(spec, job=plain), "x.json") == [
        "train.py",
        "--deepspeed_config",
        "x.json",
    ]


def test_a_scripts_space_holds_only_what_its_config_sets(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workdir)
    command = ["train.py", "--deepspeed_config", "ds.json"]
    problem = load_problem("deepspeed", "tiny", "local:2", command=command)
    assert problem.workload.global_batch_size == 32
    assert set(problem.space.values) <= {"zero", "mbs", "reduce_bucket", "overlap_comm"} | {
        "allgather_bucket",
        "nccl_algo",
        "nccl_proto",
        "offload_optimizer",  # held as the config has it
    }
    assert problem.space.values["mbs"] == (1, 2, 4, 8, 16)  # every divisor of 32 / 2 ranks
    assert {c.pp for c in problem.enumerate().valid} == {1}
    with pytest.raises(InputError, match="Megatron-LM command must give --hidden-size"):
        load_problem("megatron", "tiny", "local:2", command=command)
    with pytest.raises(InputError, match="list the ones it applies"):
        load_problem("torch", "tiny", "local:2", command=command)
    (workdir / "space.yaml").write_text("engine: deepspeed\nknobs:\n  zero: [0, 1]\n")
    narrowed = load_problem("deepspeed", "tiny", "local:2", "space.yaml", command=command)
    # what it lists, and the user's own stage 3; pp is not derived for it
    assert narrowed.space.values["zero"] == (0, 1, 3)
    (workdir / "space.yaml").write_text("engine: deepspeed\nknobs:\n  pp: [1, 2]\n  zero: [0]\n")
    with pytest.raises(InputError, match="sets pp in its own code"):
        load_problem("deepspeed", "tiny", "local:2", "space.yaml", command=command)


def test_the_exported_command_runs_the_users_script_with_the_tuned_file(workdir: Path) -> None:
    job = parse_job(
        ["train.py", "--tag", "a b", "--deepspeed_config=ds.json"], workdir, "deepspeed"
    )
    spec = TrialSpec(
        engine="deepspeed",
        workload=load_workload("tiny"),
        cluster=load_cluster("local:2"),
        config=TrainConfig(dp=2),
        job=job,
    )
    line = job_command(spec, "ds_config.json")
    assert line == "train.py --tag 'a b' --deepspeed_config=\"$here/ds_config.json\""


def test_run_refuses_a_launcher_word_in_one_line(tmp_path: Path) -> None:
    result = autotune("run", "--", "deepspeed", "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "drop 'deepspeed'" in result.stderr
    assert not (tmp_path / "results").exists()


def test_the_users_own_config_is_read_from_their_file_and_flags(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = load_workload("tiny")

    def users(config: dict[str, object], *flags: str) -> tuple[dict[str, object], str]:
        (workdir / "ds.json").write_text(json.dumps(config))
        job = parse_job(["train.py", *flags, "--deepspeed", "ds.json"], workdir, "deepspeed")
        return users_knobs(job, tiny, 2), ds_precision(job)

    plain = {"reduce_bucket": 500_000_000, "allgather_bucket": 500_000_000}  # DeepSpeed's
    no_offload = {"offload_optimizer": False, "offload_param": False}
    # the Trainer's flag where the file says "auto"; bf16 "auto" follows --bf16
    assert users(USER_CONFIG, "--per_device_train_batch_size", "2", "--bf16") == (
        {"zero": 3, "mbs": 2, **plain, "overlap_comm": True}  # on at stage 3
        | {"offload_optimizer": True, "offload_param": False},
        "bf16",
    )
    assert users(USER_CONFIG)[1] == "fp32"
    zero = {"stage": 2, "reduce_bucket_size": 5e7, "overlap_comm": True}  # 5e7: a float
    knobs, precision = users({"train_micro_batch_size_per_gpu": 4, "zero_optimization": zero})
    assert (
        knobs
        == {
            "zero": 2,
            "mbs": 4,
            "reduce_bucket": 50_000_000,
            "allgather_bucket": 500_000_000,
            "overlap_comm": True,
        }
        | no_offload
    )
    assert precision == "fp32"
    assert (
        users({"fp16": {"enabled": True}})[0]
        == {  # HF's default 8
            "zero": 0,
            "mbs": 8,
            **plain,
            "overlap_comm": False,
        }
        | no_offload
    )
    monkeypatch.chdir(workdir)
    problem = load_problem(
        "deepspeed", "tiny", "local:2", command=["train.py", "--deepspeed", "ds.json"]
    )
    first = problem.users_config()
    assert first is not None and (first.zero, first.mbs) == (0, 8)
    offloading = {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": None}
    offloaded = users({"train_micro_batch_size_per_gpu": 4, "zero_optimization": offloading})
    assert offloaded[0] == {"zero": 3, "mbs": 4, **plain, "overlap_comm": True} | {
        "offload_optimizer": True,
        "offload_param": False,
    }


def test_the_users_config_is_filled_as_deepspeed_and_the_trainer_fill_it(workdir: Path) -> None:
    """DeepSpeed's defaults where the file is silent (overlap_comm true at stage 3 only,
    buckets of 5e8, the micro-batch from train_batch_size over the ranks); the Trainer's
    "auto" reduce_bucket_size is the model's hidden_size squared."""
    llama = load_workload("llama3-8b")

    def users(config: dict[str, object], *command: str) -> dict[str, object]:
        (workdir / "ds.json").write_text(json.dumps(config))
        return users_knobs(parse_job(["train.py", *command], workdir, "deepspeed"), llama, 4)

    plain = ("--deepspeed_config", "ds.json")
    stage3 = users({"train_batch_size": 32, "zero_optimization": {"stage": 3}}, *plain)
    assert stage3["overlap_comm"] is True and stage3["mbs"] == 8  # 32 over 4 ranks
    assert stage3["reduce_bucket"] == 500_000_000
    accum = {"train_batch_size": 32, "gradient_accumulation_steps": 2}
    stage2 = users({**accum, "zero_optimization": {"stage": 2}}, *plain)
    assert stage2["overlap_comm"] is False and stage2["mbs"] == 4
    assert users({"train_batch_size": 8, "zero_optimization": True}, *plain)["zero"] == 1
    auto = {"stage": 3, "reduce_bucket_size": "auto", "overlap_comm": False}
    hf = users({"zero_optimization": auto}, "--deepspeed", "ds.json")
    assert hf["reduce_bucket"] == llama.hidden_size**2 and hf["overlap_comm"] is False


def test_a_config_that_offloads_keeps_offloading_in_every_trial(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workdir)  # ds.json: USER_CONFIG, ZeRO 3 with the optimizer on the CPU
    problem = load_problem(
        "deepspeed", "tiny", "local:2", command=["train.py", "--deepspeed", "ds.json"]
    )
    assert problem.space.values["offload_optimizer"] == (True,)
    valid = problem.enumerate().valid
    assert len(valid) and all(c.offload_optimizer and c.zero >= 1 for c in valid)


def test_hugging_face_batch_flags_are_read_and_rewritten_in_every_spelling(
    workdir: Path,
) -> None:
    """HfArgumentParser gives each field `--a_b` and `--a-b`, each as `--f v` or `--f=v`;
    the last one given wins. The trial rewrites the user's flag where it stands."""
    (workdir / "ds.json").write_text(json.dumps({"train_batch_size": "auto"}))

    def job(*flags: str) -> UserJob:
        return parse_job(["train.py", *flags, "--deepspeed", "ds.json"], workdir, "deepspeed")

    hyphens = job("--per-device-train-batch-size", "2", "--gradient-accumulation-steps=3")
    assert global_batch(hyphens, world_size=8) == 48
    last = job("--per_device_train_batch_size", "4", "--per-device-train-batch-size=2")
    assert global_batch(last, world_size=8) == 2 * 1 * 8
    assert users_knobs(last, load_workload("tiny"), 8)["mbs"] == 2
    spec = TrialSpec(
        engine="deepspeed",
        workload=dataclasses.replace(load_workload("tiny"), global_batch_size=32),
        cluster=load_cluster("local:2"),
        config=TrainConfig(dp=2, mbs=4),
        job=hyphens,
    )
    assert export_argv(spec, "/t/ds.json") == [
        "train.py",
        "--per-device-train-batch-size",
        "4",
        "--gradient-accumulation-steps=4",
        "--deepspeed",
        "/t/ds.json",
    ]
    assert export_argv(dataclasses.replace(spec, job=last), "/t/ds.json") == [
        "train.py",
        "--per_device_train_batch_size",
        "4",
        "--per-device-train-batch-size=4",
        "--deepspeed",
        "/t/ds.json",
        "--gradient_accumulation_steps",
        "4",
    ]


def test_an_nvme_offload_is_kept_as_given_in_every_trial_and_the_export(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvme = {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": True}
    zero = {"stage": 3, "offload_optimizer": nvme, "offload_param": dict(nvme)}
    (workdir / "ds.json").write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": zero})
    )
    monkeypatch.chdir(workdir)
    command = ["train.py", "--deepspeed_config", "ds.json"]
    problem = load_problem("deepspeed", "tiny", "local:2", command=command)
    for knob in ("offload_optimizer", "offload_param"):
        assert problem.space.values[knob] == (False,)
        assert "NVMe" in problem.space.origins[knob]
    assert problem.job is not None
    for config in problem.enumerate().valid:
        written = trial_ds_config(problem.job, problem.workload, config)["zero_optimization"]
        assert written["offload_optimizer"] == nvme and written["offload_param"] == nvme
    on = TrainConfig(dp=2, zero=3, offload_optimizer=True, offload_param=True)
    written = trial_ds_config(problem.job, problem.workload, on)["zero_optimization"]
    assert written["offload_optimizer"] == nvme and written["offload_param"] == nvme


HF_ZERO2 = {
    "fp16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "zero_optimization": {
        "stage": 2,
        "allgather_partitions": True,
        "allgather_bucket_size": 2e8,
        "overlap_comm": True,
        "reduce_scatter": True,
        "reduce_bucket_size": 2e8,
        "contiguous_gradients": True,
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}
"""Hugging Face's documented ZeRO-2 config (docs: DeepSpeed integration, "ZeRO-2 config")."""


def test_the_users_config_is_a_trial_when_its_values_are_not_in_the_space(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workdir / "ds.json").write_text(json.dumps(HF_ZERO2))
    monkeypatch.chdir(workdir)
    command = ["train.py", "--per_device_train_batch_size", "4", "--deepspeed", "ds.json"]
    problem = load_problem("deepspeed", "tiny", "local:2", command=command)
    users = problem.users_config()
    assert users is not None
    assert (users.zero, users.mbs, users.overlap_comm) == (2, 4, True)
    assert (users.reduce_bucket, users.allgather_bucket) == (200_000_000, 200_000_000)
    assert 200_000_000 in problem.space.values["reduce_bucket"]
    assert 500_000_000 in problem.space.values["reduce_bucket"]  # the space's kept
    assert "your ds_config" in problem.space.origins["reduce_bucket"]
    assert problem.space.values["allgather_bucket"] == (200_000_000,)  # no space value: yours
    assert users in problem.enumerate().valid


def test_a_pipeline_script_without_train_batch_size_is_refused_before_any_trial(
    workdir: Path,
) -> None:
    (workdir / "pipe.py").write_text("from deepspeed.pipe import PipelineModule\n")
    (workdir / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2}))
    job = parse_job(["pipe.py", "--deepspeed_config", "ds.json"], workdir, "deepspeed")
    with pytest.raises(InputError, match="give train_batch_size, autotune cannot read the pi"):
        global_batch(job, world_size=8)
    assert global_batch(parse_job(["train.py", *job.command[1:]], workdir, "deepspeed"), 8) == 16
    (workdir / "ds.json").write_text(json.dumps({"train_batch_size": 64}))
    given = parse_job(["pipe.py", "--deepspeed_config", "ds.json"], workdir, "deepspeed")
    assert global_batch(given, world_size=8) == 64
