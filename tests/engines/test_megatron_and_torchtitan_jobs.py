# ruff: noqa: UP032 -- the log lines are built as their source builds them
"""Megatron-LM and torchtitan commands as trials: their log lines read in the exact format
their source prints, their commands rewritten so that their own argument parsers take them."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import types
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from autotune.engines.megatron import jobs as megatron_job
from autotune.engines.torch import torchtitan as torchtitan_job
from autotune.errors import InputError
from autotune.problem import load_problem
from autotune.rank.logged import LoggedMemory, LoggedStep
from autotune.space import TrainConfig
from autotune.specs import load_cluster, load_workload
from autotune.trial.spec import StepPlan, TrialSpec, UserJob
from tests.engines.megatron.test_megatron import megatron_flags
from tests.paths import TESTS

PRETRAIN = [
    "pretrain_gpt.py",
    *["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32"],
    *["--group-query-attention", "--num-query-groups", "8", "--swiglu"],
    *["--seq-length", "4096", "--max-position-embeddings", "4096"],
    *["--tensor-model-parallel-size", "8", "--sequence-parallel"],
    *["--micro-batch-size", "1", "--global-batch-size", "256", "--bf16"],
    *["--recompute-activations", "--train-iters", "500000", "--lr-warmup-iters", "2000"],
    *["--lr", "3e-4", "--save", "/ckpt/llama", "--save-interval", "1000", "--load", "/ckpt/llama"],
    *["--log-interval", "100", "--eval-iters", "10", "--eval-interval", "1000"],
    *["--data-path", "/data/tokens_text_document", "--tokenizer-type", "NullTokenizer"],
    *["--vocab-size", "128256"],
]


def megatron_spec(config: TrainConfig, command: list[str] = PRETRAIN) -> TrialSpec:
    return TrialSpec(
        engine="megatron",
        workload=megatron_job.workload_from_command(command, "pretrain_gpt"),
        cluster=load_cluster("dgx-h100:2"),
        config=config,
        steps=StepPlan(max_warmup=12, measured_steps=8),
        job=UserJob(command=tuple(command), framework="megatron", workdir="/work"),
    )


def megatron_parser() -> argparse.ArgumentParser:
    """Megatron-LM's flags as its parser takes them (tests/data, from arguments.py)."""
    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False, exit_on_error=False)
    for flag, takes_value in megatron_flags().items():
        if takes_value:
            parser.add_argument(flag)
        else:
            parser.add_argument(flag, action="store_true")
    return parser


def training_log_line(iteration: int, train_iters: int, elapsed_ms: float, micro: bool) -> str:
    """`training_log` in megatron/training/training.py at core_v0.14.0, lines 1523-1578, with
    --log-throughput; `micro`: core_v0.16.0's timestamp with microseconds."""
    stamp = "%Y-%m-%d %H:%M:%S.%f" if micro else "%Y-%m-%d %H:%M:%S"
    log_string = f" [{datetime(2026, 12, 1, 4, 20, 7, 123456).strftime(stamp)}]"
    log_string += " iteration {:8d}/{:8d} |".format(iteration, train_iters)
    log_string += " consumed samples: {:12d} |".format(iteration * 256)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(elapsed_ms)
    log_string += f" throughput per GPU (TFLOP/s/GPU): {412.3:.1f} |"
    log_string += f" learning rate: {3e-4:.6E} |"
    log_string += f" global batch size: {256:5d} |"
    log_string += " {}: {:.6E} |".format("lm loss", 7.123)
    log_string += f" loss scale: {1.0:.1f} |"
    log_string += f" grad norm: {1.234:.3f} |"
    log_string += " number of skipped iterations: {:3d} |".format(0)
    log_string += " number of nan iterations: {:3d} |".format(0)
    return log_string


def report_memory_line(rank: int, max_allocated_mb: float) -> str:
    """`report_memory` in megatron/training/utils.py at core_v0.14.0, lines 263-272."""
    mega_bytes = 1024.0 * 1024.0
    string = "(after 1 iterations)" + " memory (MB)"
    string += " | allocated: {}".format(51234567890 / mega_bytes)
    string += " | max allocated: {}".format(max_allocated_mb)
    string += " | reserved: {}".format(61234567890 / mega_bytes)
    string += " | max reserved: {}".format(61234567890 / mega_bytes)
    return f"[Rank {rank}] {string}"


@pytest.mark.parametrize("micro", [False, True])
def test_megatron_iteration_lines_give_step_times(micro: bool) -> None:
    spec = megatron_spec(TrainConfig(tp=8, dp=2, mbs=1))
    line = training_log_line(17, 20, 5234.5, micro)
    # the step's loss as Megatron-LM averaged it over micro-batches and data-parallel ranks
    assert megatron_job.parse_line(line, spec) == (LoggedStep(5.2345, 7.123),)


def test_megatron_memory_report_gives_the_peak_allocated() -> None:
    spec = megatron_spec(TrainConfig(tp=8, dp=2, mbs=1))
    (memory,) = megatron_job.parse_line(report_memory_line(8, 70123.25), spec)
    assert isinstance(memory, LoggedMemory)
    assert memory.peak_bytes == int(70123.25 * 2**20)
    assert memory.kind == "megatron_max_allocated"


def test_other_megatron_lines_are_not_steps() -> None:
    spec = megatron_spec(TrainConfig(tp=8, dp=2, mbs=1))
    for line in [
        "[after training is done] datetime: 2026-12-01 04:20:07 ",
        " validation loss at iteration 1000 | lm loss value: 2.1E+00 | lm loss PPL: 8.1E+00 | ",
        "> building train, validation, and test datasets ...",
    ]:
        assert megatron_job.parse_line(line, spec) == ()


def test_megatron_model_is_read_from_the_users_flags() -> None:
    w = megatron_job.workload_from_command(PRETRAIN, "pretrain_gpt")
    assert (w.num_layers, w.hidden_size, w.num_attention_heads) == (32, 4096, 32)
    assert w.num_query_groups == 8
    assert w.ffn_hidden_size == 10880  # Megatron-LM's SwiGLU default: int(4h * 2/3 / 64) * 64
    assert (w.seq_length, w.global_batch_size, w.vocab_size, w.precision) == (
        4096,
        256,
        128256,
        "bf16",
    )
    without_batch = [a for a in PRETRAIN if a not in ("--global-batch-size", "256")]
    with pytest.raises(InputError, match="must give --global-batch-size"):
        megatron_job.workload_from_command(without_batch, "x")
    moe = [*PRETRAIN, "--num-experts", "8", "--moe-router-topk", "2", "--moe-layer-freq", "2"]
    mixture = megatron_job.workload_from_command([*moe, "--kv-channels", "256"], "x")
    assert (mixture.num_moe_experts, mixture.moe_router_topk, mixture.moe_layers) == (8, 2, 16)
    assert mixture.expert_ffn_size == w.ffn_hidden_size  # Megatron's default expert width
    assert mixture.head_dim == 256
    with pytest.raises(InputError, match="not a list of layers"):
        megatron_job.workload_from_command([*moe, "--moe-layer-freq", "([1]*3+[0])*8"], "x")


def test_megatron_trials_replace_the_users_expert_layout() -> None:
    command = [*PRETRAIN, "--num-experts", "8", "--expert-model-parallel-size", "2"]
    command += ["--moe-token-dispatcher-type", "allgather"]
    argv = megatron_job.trial_argv(megatron_spec(TrainConfig(tp=2, dp=8, ep=4, sp=True), command))
    args = megatron_parser().parse_args(argv[1:])  # Megatron-LM's own flag list
    assert (args.expert_model_parallel_size, args.expert_tensor_parallel_size) == ("4", "1")
    assert args.moe_token_dispatcher_type == "alltoall"  # the user's allgather, replaced
    assert argv.count("--expert-model-parallel-size") == 1
    assert args.num_experts == "8"  # the model stays the user's


def test_megatron_trial_command_is_one_megatron_lm_parses_with_the_trials_config() -> None:
    config = TrainConfig(
        tp=2, pp=2, dp=4, zero=1, mbs=2, recompute="full", recompute_num_layers=2,
        overlap_comm=True, ddp_bucket_mb=160,
    )  # fmt: skip
    argv = megatron_job.trial_argv(megatron_spec(config))
    assert argv[0] == "pretrain_gpt.py"
    args = megatron_parser().parse_args(argv[1:])
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == ("2", "2")
    assert not args.sequence_parallel and not args.recompute_activations  # the user's, replaced
    assert args.use_distributed_optimizer and args.overlap_grad_reduce
    assert args.ddp_bucket_size == str(160 * 2**20 // 4)
    assert (args.micro_batch_size, args.global_batch_size) == ("2", "256")  # the user's batch
    assert (args.recompute_granularity, args.recompute_num_layers) == ("full", "2")
    assert args.train_iters == "20"  # max warm-up + measured steps
    assert args.lr_decay_iters == "500000"  # the user's schedule, not the trial's length
    assert (args.log_interval, args.eval_iters) == ("1", "0")
    assert args.save is None and args.load is None and args.save_interval is None
    assert (args.data_path, args.lr, args.lr_warmup_iters) == (
        "/data/tokens_text_document",
        "3e-4",
        "2000",
    )
    for flag in ("--tensor-model-parallel-size", "--micro-batch-size", "--train-iters"):
        assert argv.count(flag) == 1, f"{flag} given twice"


def test_a_megatron_command_with_another_cp_communication_is_refused() -> None:
    for extra in (["--cp-comm-type", "a2a"], ["--hierarchical-context-parallel-sizes", "2", "2"]):
        with pytest.raises(InputError, match="p2p ring"):
            megatron_job.workload_from_command([*PRETRAIN, *extra], "x")


def test_a_megatron_command_without_p2p_overlap_is_refused() -> None:
    """Trials may interleave two stages, which Megatron-LM allows only with its p2p overlap."""
    with pytest.raises(InputError, match="--no-overlap-p2p-communication"):
        megatron_job.workload_from_command([*PRETRAIN, "--no-overlap-p2p-communication"], "x")


def test_a_megatron_command_with_context_parallelism_is_tuned_with_the_trials_cp() -> None:
    command = [*PRETRAIN, "--context-parallel-size", "2"]
    for cp in (1, 4):
        config = TrainConfig(tp=2, cp=cp, dp=8 // cp, mbs=1)
        argv = megatron_job.trial_argv(megatron_spec(config, command))
        args = megatron_parser().parse_args(argv[1:])
        assert args.context_parallel_size == (str(cp) if cp > 1 else None)
        assert argv.count("--context-parallel-size") == (cp > 1)


def test_megatron_export_keeps_the_users_run_and_checkpoints() -> None:
    argv = megatron_job.export_argv(megatron_spec(TrainConfig(tp=4, dp=4, mbs=2)))
    args = megatron_parser().parse_args(argv[1:])
    assert args.tensor_model_parallel_size == "4"
    assert (args.train_iters, args.save, args.log_interval) == ("500000", "/ckpt/llama", "100")


def test_megatron_trials_report_and_profile_nothing_and_the_export_as_the_user_does() -> None:
    command = [*PRETRAIN, "--tensorboard-dir", "/tb", "--wandb-project", "llama"]
    command += ["--wandb-exp-name", "run1", "--profile", "--profile-step-start", "3"]
    spec = megatron_spec(TrainConfig(tp=4, dp=4, mbs=2), command)
    trial = megatron_parser().parse_args(megatron_job.trial_argv(spec)[1:])
    assert trial.tensorboard_dir is None and trial.wandb_project is None
    assert not trial.profile
    export = megatron_parser().parse_args(megatron_job.export_argv(spec)[1:])
    assert (export.tensorboard_dir, export.wandb_project) == ("/tb", "llama")
    assert export.profile and export.profile_step_start == "3"


def test_a_sample_based_megatron_schedule_stays_sample_based() -> None:
    command = [a for a in PRETRAIN if a not in ("--train-iters", "500000")]
    command += ["--train-samples", "1000000"]
    argv = megatron_job.trial_argv(megatron_spec(TrainConfig(tp=8, dp=2, mbs=1), command))
    args = megatron_parser().parse_args(argv[1:])
    assert args.train_samples == str(20 * 256) and args.train_iters is None
    assert args.lr_decay_samples == "1000000"  # warm-up samples stay below the decay


def test_flags_tied_to_the_users_own_layout_are_left_out() -> None:
    command = [*PRETRAIN, "--tp-comm-overlap", "--decoder-first-pipeline-num-layers", "3"]
    argv = megatron_job.trial_argv(megatron_spec(TrainConfig(tp=1, dp=16, mbs=1), command))
    args = megatron_parser().parse_args(argv[1:])
    assert not args.tp_comm_overlap and args.decoder_first_pipeline_num_layers is None


def test_a_command_that_overlaps_tp_comm_has_its_study_search_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--tp-comm-overlap is the user's setting: the study searches it beside the layouts
    where sequence parallelism allows it, and a trial that keeps it writes it back; with
    --transformer-impl local (no Transformer Engine) it is held off."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / PRETRAIN[0]).write_text("")
    problem = load_problem(
        "megatron", "tiny", "dgx-h100:2", None, [*PRETRAIN, "--tp-comm-overlap"]
    )
    assert problem.space.values["tp_comm_overlap"] == (False, True)
    overlapped = [c for c in problem.enumerate().valid if c.tp_comm_overlap]
    assert overlapped and all(c.sp and c.tp > 1 for c in overlapped)
    argv = megatron_job.trial_argv(megatron_spec(overlapped[0], [*PRETRAIN, "--tp-comm-overlap"]))
    assert megatron_parser().parse_args(argv[1:]).tp_comm_overlap
    local = [*PRETRAIN, "--tp-comm-overlap", "--transformer-impl", "local"]
    held = load_problem("megatron", "tiny", "dgx-h100:2", None, local)
    assert held.space.values.get("tp_comm_overlap", (False,)) == (False,)
    assert (
        "tp_comm_overlap"
        not in load_problem("megatron", "tiny", "dgx-h100:2", None, PRETRAIN).space.values
    )


def test_a_command_that_overlaps_the_experts_exchanges_has_its_study_search_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--overlap-moe-expert-parallel-comm is the user's setting: the study searches it where
    megatron-core allows it (expert parallelism, no full recomputation), and a trial without
    it drops the user's flag and its companion --delay-wgrad-compute."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / PRETRAIN[0]).write_text("")
    moe = [a for a in PRETRAIN if a != "--recompute-activations"]
    moe += ["--num-experts", "8", "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    problem = load_problem("megatron", "tiny", "dgx-h100:2", None, moe)
    assert problem.space.values["ep_comm_overlap"] == (False, True)
    valid = problem.enumerate().valid
    overlapped = [c for c in valid if c.ep_comm_overlap]
    assert overlapped and all(c.ep > 1 and c.recompute != "full" for c in overlapped)
    argv = megatron_job.trial_argv(megatron_spec(overlapped[0], moe))
    args = megatron_parser().parse_args(argv[1:])
    assert args.overlap_moe_expert_parallel_comm and args.delay_wgrad_compute
    plain = next(c for c in valid if not c.ep_comm_overlap)
    argv = megatron_job.trial_argv(megatron_spec(plain, moe))
    args = megatron_parser().parse_args(argv[1:])
    # megatron-core refuses --delay-wgrad-compute without the overlap: it goes with it
    assert not args.overlap_moe_expert_parallel_comm and not args.delay_wgrad_compute


# torchtitan ------------------------------------------------------------------------------


class Color:
    """torchtitan/tools/utils.py `Color` at v0.2.2 (the ANSI codes its metrics line uses)."""

    black, red, green, yellow = "\033[30m", "\033[31m", "\033[32m", "\033[33m"
    blue, magenta, cyan, white = "\033[34m", "\033[35m", "\033[36m", "\033[37m"
    reset, orange, turquoise = "\033[39m", "\033[38;2;255;165;0m", "\033[38;2;64;224;208m"


class NoColor:
    def __getattr__(self, name: str) -> str:
        return ""


def metrics_line(step: int, tps: float, reserved_gib: float, color: Any) -> str:
    """`MetricsProcessor.log` in torchtitan/components/metrics.py at v0.2.2, after the
    "[titan] %(asctime)s - %(name)s - %(levelname)s - " prefix of tools/logging.py."""
    global_avg_loss, grad_norm, tflops, mfu = 8.12345, 1.5, 123.456, 40.1
    return "[titan] 2026-12-01 04:20:07,123 - root - INFO - " + (
        f"{color.red}step: {step:2}  "
        f"{color.green}loss: {global_avg_loss:8.5f}  "
        f"{color.orange}grad_norm: {grad_norm:7.4f}  "
        f"{color.turquoise}memory: {reserved_gib:5.2f}GiB"
        f"({reserved_gib / 80 * 100:.2f}%)  "
        f"{color.blue}tps: {round(tps):,}  "
        f"{color.cyan}tflops: {tflops:,.2f}  "
        f"{color.magenta}mfu: {mfu:.2f}%{color.reset}"
    )


def validation_line(step: int) -> str:
    """`MetricsProcessor.log_validation` at v0.2.2."""
    color = NoColor()
    return (
        f"{color.yellow}validate step: {step:2}  "
        f"{color.green}loss: {2.5:7.4f}  "
        f"{color.turquoise}memory: {10.0:5.2f}GiB"
        f"({12.5:.2f}%)  "
        f"{color.blue}tps: {round(5000.0):,}{color.reset}"
    )


TITAN = ["-m", "torchtitan.train", "--job.config_file", "llama3_8b.toml"]


def titan_spec(config: TrainConfig, workdir: Path, world: str = "dgx-h100:1") -> TrialSpec:
    cluster = load_cluster(world)
    batch, seq = torchtitan_job.batch_and_sequence(TITAN, workdir, cluster.world_size)
    workload = load_workload("llama3-8b")
    return TrialSpec(
        engine="torch",
        workload=dataclasses.replace(workload, global_batch_size=batch, seq_length=seq),
        cluster=cluster,
        config=config,
        steps=StepPlan(max_warmup=12, measured_steps=8),
        job=UserJob(command=tuple(TITAN), framework="torchtitan", workdir=str(workdir)),
    )


@pytest.fixture
def titan_dir(tmp_path: Path) -> Path:
    (tmp_path / "llama3_8b.toml").write_text(
        "[training]\nlocal_batch_size = 1\nglobal_batch_size = 64\nseq_len = 8192\nsteps = 1000\n"
        "[parallelism]\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 1\n"
        "[checkpoint]\nenable = true\nfolder = 'checkpoint'\n"
        "[metrics]\nenable_tensorboard = true\nenable_wandb = true\n"
        "[profiling]\nenable_profiling = true\nenable_memory_snapshot = true\n"
        "[validation]\nenable = true\n"
    )
    return tmp_path


@pytest.mark.parametrize("color", [Color(), NoColor()], ids=["colour", "no_colour"])
def test_torchtitan_metrics_lines_give_the_steps_time_and_memory(
    color: Any, titan_dir: Path
) -> None:
    spec = titan_spec(TrainConfig(tp=2, dp=4, zero=3, mbs=1), titan_dir)
    step, memory = torchtitan_job.parse_line(metrics_line(5, 7000.4, 61.25, color), spec)
    # 64 sequences of 8192 tokens over 8 devices at 7,000 tokens/s each
    assert step == LoggedStep(64 * 8192 / (7000 * 8), 8.12345)  # and its global average loss
    assert memory == LoggedMemory(int(61.25 * 2**30), "torchtitan_max_reserved")


def test_torchtitan_validation_and_other_lines_are_not_steps(titan_dir: Path) -> None:
    spec = titan_spec(TrainConfig(dp=8, zero=3, mbs=1), titan_dir)
    assert torchtitan_job.parse_line(validation_line(10), spec) == ()
    assert (
        torchtitan_job.parse_line("[titan] ... - root - INFO - Training starts at step 1", spec)
        == ()
    )


def test_torchtitan_batch_comes_from_its_toml_and_flags(titan_dir: Path) -> None:
    assert torchtitan_job.batch_and_sequence(TITAN, titan_dir, 8) == (64, 8192)
    flags = [*TITAN, "--training.global-batch-size", "-1", "--training.local_batch_size=4"]
    flags += ["--parallelism.tensor_parallel_degree", "2"]
    assert torchtitan_job.batch_and_sequence(flags, titan_dir, 8) == (4 * 4, 8192)
    with pytest.raises(InputError, match="context parallelism"):
        torchtitan_job.batch_and_sequence(
            [*TITAN, "--parallelism.context_parallel_degree", "2"], titan_dir, 8
        )


@pytest.fixture(scope="module")
def config_manager() -> Iterator[Any]:
    """torchtitan's own `ConfigManager` (config/manager.py) from the installed package,
    without the package's __init__, which imports its GPU kernels (triton)."""
    found = importlib.util.find_spec("torchtitan")
    if found is None or found.submodule_search_locations is None:
        pytest.skip("torchtitan is not installed (scripts/setup.sh installs it)")
    saved = {k: v for k, v in sys.modules.items() if k.startswith("torchtitan")}
    package = types.ModuleType("torchtitan")
    package.__path__ = list(found.submodule_search_locations)
    sys.modules["torchtitan"] = package
    from torchtitan.config.manager import ConfigManager

    yield ConfigManager
    for name in [k for k in sys.modules if k.startswith("torchtitan")]:
        del sys.modules[name]
    sys.modules.update(saved)


@pytest.mark.parametrize(
    "config",
    [
        TrainConfig(tp=2, dp=4, zero=3, mbs=2, recompute="full"),
        TrainConfig(dp=8, zero=0, mbs=8, recompute="none"),
        TrainConfig(tp=4, dp=2, zero=2, mbs=4, recompute="selective"),
        TrainConfig(dp=8, zero=3, hsdp=2, mbs=2),
    ],
    ids=["fsdp_tp", "ddp", "zero2", "hsdp"],
)
def test_torchtitan_trial_command_is_one_torchtitan_parses_with_the_trials_config(
    config: TrainConfig, titan_dir: Path, config_manager: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = config_manager
    spec = titan_spec(config, titan_dir, "dgx-h100:1")
    argv = torchtitan_job.trial_argv(spec)
    assert argv[:2] == ["-m", "torchtitan.train"]
    monkeypatch.chdir(titan_dir)
    parsed = manager().parse_args(argv[2:])
    p, t = parsed.parallelism, parsed.training
    assert (p.tensor_parallel_degree, p.pipeline_parallel_degree) == (config.tp, 1)
    if config.zero == 0:
        assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree) == (config.dp, 1)
    else:
        degrees = (config.hsdp, config.dp // config.hsdp)  # HSDP: replicas of shards
        assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree) == degrees
        assert p.fsdp_reshard_after_forward == ("always" if config.zero == 3 else "never")
    assert (t.local_batch_size, t.global_batch_size, t.seq_len) == (config.mbs, 64, 8192)
    assert parsed.activation_checkpoint.mode == config.recompute
    assert t.steps == 20
    assert parsed.metrics.log_freq == 1 and parsed.metrics.disable_color_printing
    assert not parsed.checkpoint.enable and not parsed.validation.enable
    assert not parsed.metrics.enable_tensorboard and not parsed.metrics.enable_wandb
    assert not parsed.profiling.enable_profiling and not parsed.profiling.enable_memory_snapshot
    exported = manager().parse_args(torchtitan_job.export_argv(spec)[2:])
    assert exported.training.steps == 1000 and exported.checkpoint.enable  # the user's run
    assert exported.validation.enable and exported.metrics.enable_tensorboard
    assert exported.metrics.enable_wandb and exported.profiling.enable_profiling
    assert exported.parallelism.tensor_parallel_degree == config.tp


def test_exported_train_scripts_run_the_users_command_with_the_tuned_flags(
    titan_dir: Path,
) -> None:
    from autotune.engines import get_engine
    from autotune.export.scripts import train_script
    from tests.engines.megatron.test_megatron import best_trial, check_golden

    golden = TESTS / "golden" / "jobs"
    trial = best_trial(54321.0, "measured")
    megatron = megatron_spec(TrainConfig(tp=4, pp=2, dp=2, mbs=1, zero=1, overlap_comm=True))
    megatron_sh = train_script(get_engine("megatron"), megatron, trial, "mine")
    check_golden("megatron.train.sh", megatron_sh, golden)
    titan = titan_spec(TrainConfig(tp=2, dp=4, zero=2, mbs=2, recompute="full"), titan_dir)
    titan = dataclasses.replace(titan, job=dataclasses.replace(titan.job, workdir="/work/titan"))
    titan_sh = train_script(get_engine("torch"), titan, trial, "mine")
    check_golden("torchtitan.train.sh", titan_sh, golden)


def test_a_torchtitan_study_takes_model_batch_and_space_from_the_command(
    titan_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.problem import load_problem

    monkeypatch.chdir(titan_dir)
    with pytest.raises(InputError, match="no preset of the torchtitan model"):
        load_problem("torch", "tiny", "dgx-h100:2", command=TITAN)  # debugmodel, no --model
    (titan_dir / "llama3_8b.toml").write_text(
        (titan_dir / "llama3_8b.toml").read_text() + "[model]\nname = 'llama3'\nflavor = '8B'\n"
    )
    problem = load_problem("torch", "tiny", "dgx-h100:2", command=TITAN)
    assert problem.workload.name == "llama3-8b"
    assert (problem.workload.global_batch_size, problem.workload.seq_length) == (64, 8192)
    assert set(problem.space.values) <= torchtitan_job.KNOBS
    assert 1 not in problem.space.values["zero"]
    assert {c.pp for c in problem.enumerate().valid} == {1}
    assert problem.job is not None and problem.job.framework == "torchtitan"


def test_a_torchtitan_pipeline_and_hsdp_are_kept_in_trials_and_export(
    titan_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pp and HSDP replicas are the command's own (TOML or flags, as torchtitan reads them):
    the space holds them, and every trial and the export run them."""
    monkeypatch.chdir(titan_dir)
    (titan_dir / "llama3_8b.toml").write_text(
        (titan_dir / "llama3_8b.toml").read_text() + "[model]\nname = 'llama3'\nflavor = '8B'\n"
    )
    command = [*TITAN, "--parallelism.pipeline-parallel-degree=2"]
    command += ["--parallelism.data_parallel_replicate_degree", "2"]
    problem = load_problem("torch", "tiny", "dgx-h100:2", command=command)
    assert problem.space.values["pp"] == (2,) and problem.space.values["hsdp"] == (2,)
    valid = problem.enumerate().valid
    assert valid and {(c.pp, c.hsdp, c.dp * c.tp) for c in valid} == {(2, 2, 8)}
    spec = problem.trial_spec(valid[0], StepPlan(max_warmup=2, measured_steps=2))
    for argv in (torchtitan_job.trial_argv(spec), torchtitan_job.export_argv(spec)):
        assert argv[argv.index("--parallelism.pipeline_parallel_degree") + 1] == "2"
        assert argv[argv.index("--parallelism.data_parallel_replicate_degree") + 1] == "2"
        shard = argv[argv.index("--parallelism.data_parallel_shard_degree") + 1]
        assert int(shard) == valid[0].dp // 2
