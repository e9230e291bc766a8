"""`autotune run -- <the user's own DeepSpeed script>`: real trials of an unmodified script
on 2 gloo ranks, its exported train.sh, and the failures only a user's script can have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.problem import Problem, load_problem
from tests.conftest import REPO, autotune
from tests.study.test_study import check_deepspeed_accepts

pytestmark = pytest.mark.slow
SCRIPTS = REPO / "tests" / "data" / "user_scripts"
STUDY = "ds_train-local_2-deepspeed"


MODEL = "num_layers: 2\nhidden_size: 128\nnum_attention_heads: 2\nffn_hidden_size: 512\n" + (
    "vocab_size: 512\nseq_length: 64\nglobal_batch_size: 16\nprecision: fp32\n"
)
"""ds_train.py's default model, for --model (which skips reading it from the script)."""


def ds_train_problem(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Problem:
    """ds_train.py and its ds_config.json copied to `folder`, the working directory, as a
    problem of 2 gloo ranks (its model given, not read)."""
    for name in ("ds_train.py", "ds_config.json"):
        (folder / name).write_text((SCRIPTS / name).read_text())
    (folder / "model.yaml").write_text(MODEL)
    monkeypatch.chdir(folder)
    command = ["ds_train.py", "--deepspeed_config", "ds_config.json"]
    return load_problem("deepspeed", "model.yaml", "local:2", command=command)


def tune(
    tmp_path: Path, *script_args: str, trials: int = 3, model: bool = False
) -> subprocess.CompletedProcess[str]:
    """A study of the user's script, run from their folder as they would run it."""
    workdir = tmp_path / "project"
    if not workdir.exists():
        workdir.mkdir()
        for name in ("ds_train.py", "ds_config.json"):
            (workdir / name).write_text((SCRIPTS / name).read_text())
        (workdir / "model.yaml").write_text(MODEL)
    return autotune(
        "run",
        *(("--model", "model.yaml") if model else ()),
        "--cluster",
        "local:2",
        "--trials",
        str(trials),
        "--no-confirm",
        "--results",
        str(tmp_path / "results"),
        "--",
        "ds_train.py",
        *script_args,
        "--deepspeed_config",
        "ds_config.json",
        cwd=workdir,
        timeout=900,
    )


def trials_table(tmp_path: Path) -> list[dict[str, object]]:
    listed = autotune(
        "trials", "--study", STUDY, "--results", str(tmp_path / "results"), "--format", "json"
    )
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


def test_an_unmodified_deepspeed_script_is_tuned_and_its_export_runs_it(tmp_path: Path) -> None:
    result = tune(tmp_path, "--steps", "40")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = trials_table(tmp_path)
    assert len({(row["zero"], row["mbs"], row["reduce_bucket"]) for row in table}) == 3
    # no --model: the model is read from the script's module and first batch (ds_train.py's
    # defaults: width 128, 2 layers, vocabulary 512, 64 tokens)
    assert "about 2 layers of width 128, vocabulary 512, 64 tokens a sequence, fp32" in (
        result.stdout
    )
    assert {row["kind"] for row in table} == {"ok"}
    first = min(table, key=lambda row: int(row["number"]))  # type: ignore[call-overload]
    assert (first["zero"], first["mbs"]) == (0, 8)  # the user's own config, measured first
    second = sorted(table, key=lambda row: int(row["number"]))[1]  # type: ignore[call-overload]
    assert (second["zero"], second["mbs"]) == (0, 8)  # again, reseeded: parity's floor
    assert "your own config" in result.stdout and "parity: " in result.stdout
    # The run that read the model measured that config in full and is its trial: as many
    # launches of the script as trials.
    launches = list((tmp_path / "results" / STUDY).rglob("outcome.json"))
    assert len(launches) == len(table)
    # The winner is the config best.yaml names (ranked by its launches' standing, which need
    # not hold the fastest single launch).
    best = tmp_path / "results" / STUDY / "best"
    chosen = yaml.safe_load((best / "best.yaml").read_text())["config"]
    same = [r for r in table if (r["zero"], r["mbs"]) == (chosen["zero"], chosen["mbs"])]
    assert same and {r["kind"] for r in same} == {"ok"}
    best_row = same[0]
    first_of_best = min(int(r["number"]) for r in same)  # type: ignore[call-overload]

    trial = tmp_path / "results" / STUDY / "trials" / str(first_of_best)
    measured = json.loads((trial / "result.json").read_text())
    assert measured["source"] == "measured" and 3 <= measured["measured_steps"] <= 20
    assert measured["stopped_for"] in ("precise", "slower", "cap") and measured["interval"] > 0
    assert measured["profile"]["step_time_s"] > 0  # the profiled step of the user's loop
    assert measured["model_state_bytes"] > 0
    tried = json.loads((trial / "ds_config.json").read_text())
    assert tried["scheduler"]["type"] == "WarmupLR"  # the user's own settings are kept
    assert tried["train_batch_size"] == 16

    exported = json.loads((best / "ds_config.json").read_text())
    assert exported["optimizer"] == {"type": "Adam", "params": {"lr": 0.001}}
    assert exported["zero_optimization"]["stage"] == best_row["zero"]
    assert exported["train_micro_batch_size_per_gpu"] == best_row["mbs"]
    check_deepspeed_accepts(best / "ds_config.json")

    env = {**os.environ, "TORCHRUN": str(Path(sys.executable).with_name("torchrun"))}
    run = subprocess.run(
        ["bash", str(best / "train.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd="/",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "trained 40 steps" in run.stdout  # the user's script ran to its own end


def test_a_script_that_ignores_its_config_stops_the_study(tmp_path: Path) -> None:
    failed = "the script failed before any config was measured (config_ignored)"
    probing = tune(tmp_path, "--hardcoded-config", "--steps", "40")  # reading its model
    said = probing.stderr  # one line, as every run-time error
    assert probing.returncode == 1 and failed in said and "model_probe" in said
    result = tune(tmp_path, "--hardcoded-config", "--steps", "40", model=True)
    assert result.returncode == 1
    assert failed in result.stdout
    table = trials_table(tmp_path)
    assert len(table) == 1 and table[0]["kind"] == "config_ignored"
    assert "does not take its config from the file it was given" in str(table[0]["error"])


def test_a_script_that_ends_too_soon_is_reported_as_no_steps(tmp_path: Path) -> None:
    reading = tune(tmp_path, "--steps", "3")  # the run that reads its model is a full trial
    assert reading.returncode == 1 and "(no_steps)" in reading.stderr
    assert "ended" in reading.stderr and "model_probe" in reading.stderr
    result = tune(tmp_path, "--steps", "3", model=True)
    assert result.returncode == 1
    table = trials_table(tmp_path)
    assert len(table) == 1 and table[0]["kind"] == "no_steps"
    assert "ended" in str(table[0]["error"])  # the script ends itself with os._exit


def test_a_script_with_the_step_helper_is_tuned_on_the_knobs_it_reads(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    for name in ("plain_train.py", "plain_space.yaml"):
        (workdir / name).write_text((SCRIPTS / name).read_text())
    result = autotune(
        "run", "--engine", "torch", "--space", "plain_space.yaml", "--cluster", "local:2",
        "--trials", "3", "--sampler", "grid", "--no-confirm",
        "--results", str(tmp_path / "results"),
        "--", "plain_train.py", "--steps", "40",
        cwd=workdir, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    study = tmp_path / "results" / "plain_train-local_2-torch"
    folders = sorted((study / "trials").iterdir())
    assert len(folders) == 3
    ran = [json.loads((f / "autotune_config.json").read_text()) for f in folders]
    assert len({(k["mbs"], k["ddp_bucket_mb"]) for k in ran}) == 3  # three distinct configs
    assert all(k["mbs"] * k["grad_accum"] * 2 == 16 for k in ran)  # tiny's global batch
    best = study / "best"
    env = {**os.environ, "TORCHRUN": str(Path(sys.executable).with_name("torchrun"))}
    run = subprocess.run(
        ["bash", str(best / "train.sh")], capture_output=True, text=True, env=env, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    exported = json.loads((best / "autotune_config.json").read_text())
    assert f"trained 40 steps with mbs {exported['mbs']}" in run.stdout


def test_a_hugging_face_trainer_script_is_tuned_with_its_own_batch_flags(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    # --use_cpu: on a machine without GPUs the Trainer sees the torchrun world only with it.
    workdir = tmp_path / "project"
    workdir.mkdir()
    for name in ("hf_train.py", "hf_ds_config.json"):
        (workdir / name).write_text((SCRIPTS / name).read_text())
    result = autotune(
        "run", "--cluster", "local:2", "--trials", "2", "--no-confirm",
        "--results", str(tmp_path / "results"),
        "--", "hf_train.py", "--output_dir", "out", "--max_steps", "40", "--report_to", "none",
        "--save_strategy", "no", "--use_cpu", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "2", "--deepspeed", "hf_ds_config.json",
        cwd=workdir, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    study = tmp_path / "results" / "hf_train-local_2-deepspeed"
    for trial in sorted((study / "trials").iterdir()):
        config = json.loads((trial / "ds_config.json").read_text())
        assert config["train_batch_size"] == 16  # 4 x 2 x 2 ranks, the Trainer's flags
        outcome = json.loads((trial / "outcome.json").read_text())
        assert outcome["kind"] in ("ok", "pruned"), outcome
        ran = json.loads((trial / "command.json").read_text())  # no side effects in trials
        assert ran[ran.index("--output_dir") + 1] == str(trial.resolve() / "trainer_output")
    best = study / "best"
    exported = json.loads((best / "ds_config.json").read_text())
    assert exported["optimizer"]["params"]["lr"] == "auto"  # left for the Trainer
    env = {**os.environ, "TORCHRUN": str(Path(sys.executable).with_name("torchrun"))}
    run = subprocess.run(
        ["bash", str(best / "train.sh")], capture_output=True, text=True, env=env, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "trained 40 steps" in run.stdout
    train_sh = (best / "train.sh").read_text()
    assert f"--per_device_train_batch_size {exported['train_micro_batch_size_per_gpu']}" in (
        train_sh
    )
    assert "--output_dir out " in train_sh  # the user's own, in the export


def test_a_megatron_lm_command_is_measured_from_its_own_log_lines(tmp_path: Path) -> None:
    """The log reader end to end on 2 gloo ranks, with a stand-in that prints Megatron-LM's
    lines (megatron-core cannot train on CPU): the trial's flags reach the script, the last
    rank's iteration times are the trial's steps, the data-parallel rank 0's memory report
    its peak, and the user's checkpoint folder is left alone."""
    from autotune import runner as trial
    from autotune.engines import get_engine
    from autotune.engines.megatron import jobs as megatron_job
    from autotune.launchers.local import LocalLauncher
    from autotune.space import TrainConfig
    from autotune.specs import load_cluster
    from autotune.trial.spec import StepPlan, TrialSpec, UserJob

    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "megatron_like.py").write_text((SCRIPTS / "megatron_like.py").read_text())
    command = [
        "megatron_like.py",
        *["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4"],
        *["--seq-length", "128", "--vocab-size", "1000", "--bf16"],
        *["--global-batch-size", "16", "--micro-batch-size", "8"],
        *["--tensor-model-parallel-size", "2", "--train-iters", "100000", "--save", "ckpt"],
    ]
    spec = TrialSpec(
        engine="megatron",
        workload=megatron_job.workload_from_command(command, "megatron_like"),
        cluster=load_cluster("local:2"),
        config=TrainConfig(dp=2, mbs=2),
        steps=StepPlan(min_warmup=2, max_warmup=4, measured_steps=3, profile=False),
        job=UserJob(command=tuple(command), framework="megatron", workdir=str(workdir)),
    )
    record = trial.run(spec, get_engine("megatron"), LocalLauncher(), tmp_path / "trial", 300)
    assert record.kind == "ok", record.error
    result = record.result
    assert result is not None
    given = json.loads((workdir / "argv-rank0.json").read_text())
    assert given[given.index("--tensor-model-parallel-size") + 1] == "1"
    assert given[given.index("--micro-batch-size") + 1] == "2"
    assert given[given.index("--train-iters") + 1] == "7"  # 4 warm-up at most + 3 measured
    assert "--save" not in given and not (workdir / "ckpt").exists()
    log = (tmp_path / "trial" / "log.txt").read_text()
    printed = [
        float(line.split("elapsed time per iteration (ms): ")[1].split(" ")[0])
        for line in log.splitlines()
        if "elapsed time per iteration (ms)" in line
    ]
    assert len(printed) == 7  # every line passed through to the trial's log
    measured = [round(s * 1000, 1) for s in result.step_times_s]
    warmup = result.warmup_steps
    assert measured == printed[warmup : warmup + 3]
    assert result.peak_memory_kind == "megatron_max_allocated"
    assert result.peak_memory_bytes > 10 * 2**20  # a Python process with torch
