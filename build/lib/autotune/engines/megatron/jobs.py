"""A Megatron-LM training command (`pretrain_gpt.py` and its forks) as the trial. Pure.

The trial's flags replace the user's parallel layout, batch, recomputation, bucket and
overlap flags (the same flags the megatron engine exports); the rest of the command stays as
the user wrote it. A trial runs a fixed number of iterations, each logged, without
evaluation, checkpoints, TensorBoard, W&B or profiling; the export keeps them. The model the
estimator sees is read from the user's flags.

Steps are read from Megatron-LM's own log, in the format of `training_log` in
megatron/training/training.py at core_v0.14.0 (printed by the last rank; core_v0.16 adds
microseconds to the timestamp, which the pattern does not depend on), and peak memory from
`report_memory` in megatron/training/utils.py (printed after the first logged iteration by
each rank of data-parallel rank 0).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from autotune.engines.argv import VARIADIC, flag_value, has_flag, without_flags
from autotune.engines.framework import Framework, JobProblem
from autotune.engines.megatron.exports import (
    ARGS_FILE,
    SNIPPET_FILE,
    args_text,
    core_snippet,
    pretrain_gpt_flags,
)
from autotune.errors import InputError
from autotune.rank.logged import Logged, LoggedMemory, LoggedStep
from autotune.space.transformer_engine import without_transformer_engine
from autotune.specs import Workload
from autotune.specs.workload import Fp8Recipe, Precision
from autotune.trial.spec import TrialSpec, UserJob

TUNED = {
    "--tensor-model-parallel-size": 1,
    "--pipeline-model-parallel-size": 1,
    "--context-parallel-size": 1,
    "--expert-model-parallel-size": 1,
    "--expert-tensor-parallel-size": 1,
    "--moe-token-dispatcher-type": 1,
    "--num-layers-per-virtual-pipeline-stage": 1,
    "--num-virtual-stages-per-pipeline-rank": 1,
    "--sequence-parallel": 0,
    "--use-distributed-optimizer": 0,
    "--overlap-grad-reduce": 0,
    "--overlap-param-gather": 0,
    "--ddp-bucket-size": 1,
    "--micro-batch-size": 1,
    "--global-batch-size": 1,
    "--recompute-activations": 0,
    "--recompute-granularity": 1,
    "--recompute-method": 1,
    "--recompute-num-layers": 1,
    "--recompute-modules": VARIADIC,
    "--tp-comm-overlap": 0,
    "--overlap-moe-expert-parallel-comm": 0,
    "--delay-wgrad-compute": 0,
    # settings that hold for one layout only, which Megatron-LM refuses under others
    "--decoder-first-pipeline-num-layers": 1,
    "--decoder-last-pipeline-num-layers": 1,
    "--account-for-embedding-in-pipeline-split": 0,
    "--account-for-loss-in-pipeline-split": 0,
    "--pipeline-model-parallel-layout": 1,
    "--microbatch-group-size-per-virtual-pipeline-stage": 1,
    "--distribute-saved-activations": 0,
    "--overlap-param-gather-with-optimizer-step": 0,
}
"""The user's flags that the trial's config replaces (flag -> values it takes), and those
tied to the user's own layout (an uneven pipeline split), which the tuned layout may not
allow."""
RUN_LENGTH = {
    "--train-iters": 1,
    "--train-samples": 1,
    "--exit-interval": 1,
    "--log-interval": 1,
    "--eval-iters": 1,
    "--save": 1,
    "--save-interval": 1,
    "--load": 1,
    "--rampup-batch-size": 3,
    "--tensorboard-dir": 1,
    "--wandb-project": 1,
    "--profile": 0,
}
"""What a trial sets itself: its length, a log line per iteration, no evaluation, no
checkpoint written to or read from the user's folders, the steady global batch; and what it
leaves out: TensorBoard and W&B (Megatron-LM writes to them only where these are given) and
the profiler (`--profile`, its steps inside the trial's)."""
GPT2_VOCAB = 50257
"""GPT2BPETokenizer's vocabulary, for commands that give a vocabulary file, not a size."""

ITERATION = re.compile(
    r" iteration\s+(\d+)/\s*\d+ \|.*? elapsed time per iteration \(ms\): ([0-9.]+) \|"
)
LM_LOSS = re.compile(r"\| lm loss: ([-+0-9.eE]+) \|")
"""The iteration line's loss, averaged by Megatron-LM over the step's micro-batches and
data-parallel ranks."""
MEMORY = re.compile(
    r"\[Rank \d+\] \(after \d+ iterations\) memory \(MB\) \| allocated: [0-9.]+ \| "
    r"max allocated: ([0-9.]+) \|"
)


def parse_line(line: str, spec: TrialSpec) -> Logged:
    """A step's time or this rank's peak memory, from one line of Megatron-LM's output."""
    if match := ITERATION.search(line):
        loss = LM_LOSS.search(line)
        return (LoggedStep(float(match.group(2)) / 1000, float(loss.group(1)) if loss else None),)
    if match := MEMORY.search(line):
        return (LoggedMemory(int(float(match.group(1)) * 2**20), "megatron_max_allocated"),)
    return ()


def reporting_rank(world_size: int) -> int:
    """`print_rank_last`: the iteration line comes from the last rank."""
    return world_size - 1


def _int_flag(argv: Sequence[str], flag: str, default: int | None = None) -> int:
    value = flag_value(argv, flag)
    if value is None:
        if default is None:
            raise InputError(
                f"the Megatron-LM command must give {flag}: autotune reads the model from it"
            )
        return default
    try:
        return int(value)
    except ValueError:
        raise InputError(f"{flag} {value!r}: expected a whole number") from None


OVERLAP_FLAGS = {
    "tp_comm_overlap": "--tp-comm-overlap",
    "ep_comm_overlap": "--overlap-moe-expert-parallel-comm",
}
"""Overlaps off by default that a study searches where the user's command turns them on
(each holds only where the tuned layout allows it)."""


def given_overlaps(argv: Sequence[str]) -> dict[str, str]:
    """The knobs of `OVERLAP_FLAGS` whose flag the command gives, with the flag."""
    return {knob: flag for knob, flag in OVERLAP_FLAGS.items() if has_flag(argv, flag)}


def runs_local_attention(argv: Sequence[str]) -> bool:
    """`--transformer-impl local`: megatron-core's own attention, which has no context
    parallelism."""
    return flag_value(argv, "--transformer-impl") == "local"


def workload_from_command(argv: Sequence[str], name: str) -> Workload:
    """The model and global batch the command trains, as Megatron-LM's arguments.py reads
    them (its default MLP width included)."""
    _refuse_what_autotune_does_not_tune(argv)
    hidden = _int_flag(argv, "--hidden-size")
    heads = _int_flag(argv, "--num-attention-heads")
    swiglu = has_flag(argv, "--swiglu")
    default_ffn = int(4 * hidden * 2 / 3 / 64) * 64 if swiglu else 4 * hidden
    if flag_value(argv, "--vocab-size") is None and flag_value(argv, "--tokenizer-type") != (
        "GPT2BPETokenizer"
    ):
        raise InputError(
            "the Megatron-LM command must give --vocab-size (or use GPT2BPETokenizer)"
        )
    kv_channels = _int_flag(argv, "--kv-channels", 0)
    if hidden % heads and not kv_channels:
        raise InputError(
            f"--hidden-size {hidden} is not divisible by --num-attention-heads {heads}"
        )
    precision: Precision = (
        "bf16" if has_flag(argv, "--bf16") else "fp16" if has_flag(argv, "--fp16") else "fp32"
    )
    return Workload(
        name=name,
        fp8=_fp8_recipe(argv),
        num_layers=_int_flag(argv, "--num-layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=(
            _int_flag(argv, "--num-query-groups", 1)
            if has_flag(argv, "--group-query-attention")
            else heads
        ),
        ffn_hidden_size=_int_flag(argv, "--ffn-hidden-size", default_ffn),
        vocab_size=_int_flag(argv, "--vocab-size", GPT2_VOCAB),
        seq_length=_int_flag(argv, "--seq-length"),
        global_batch_size=_int_flag(argv, "--global-batch-size"),
        precision=precision,
        swiglu=swiglu,
        kv_channels=kv_channels,
        **_moe_fields(argv),
    )


def _refuse_what_autotune_does_not_tune(argv: Sequence[str]) -> None:
    if has_flag(argv, "--hierarchical-context-parallel-sizes") or flag_value(
        argv, "--cp-comm-type"
    ) not in (None, "p2p"):
        raise InputError(
            "--cp-comm-type/--hierarchical-context-parallel-sizes: autotune tunes cp with "
            "Megatron's default p2p ring; drop them from the command"
        )
    if has_flag(argv, "--no-overlap-p2p-communication"):
        raise InputError(
            "--no-overlap-p2p-communication: autotune tunes vpp with Megatron-LM's default "
            "p2p overlap, which runs interleaving on two stages too; drop it from the command"
        )


def _moe_fields(argv: Sequence[str]) -> dict[str, int]:
    """The mixture of experts the flags describe, in Workload's (Megatron's) names."""
    moe_layer_freq = flag_value(argv, "--moe-layer-freq") or "1"
    if not moe_layer_freq.isdigit() or int(moe_layer_freq) < 1:
        raise InputError(
            f"--moe-layer-freq {moe_layer_freq}: autotune models every k-th layer as MoE "
            "(an integer), not a list of layers"
        )
    return {
        "num_moe_experts": _int_flag(argv, "--num-experts", 0),
        "moe_router_topk": _int_flag(argv, "--moe-router-topk", 2),
        "moe_ffn_hidden_size": _int_flag(argv, "--moe-ffn-hidden-size", 0),
        "moe_shared_expert_intermediate_size": _int_flag(
            argv, "--moe-shared-expert-intermediate-size", 0
        ),
        "moe_layer_freq": int(moe_layer_freq),
    }


def _fp8_recipe(argv: Sequence[str]) -> Fp8Recipe:
    """The FP8 recipe the command trains with (`--fp8-format` turns FP8 on; Megatron-LM's
    default recipe is delayed scaling)."""
    if flag_value(argv, "--fp8-format") is None:
        return "none"
    recipe = flag_value(argv, "--fp8-recipe") or "delayed"
    if recipe not in FP8_RECIPES:
        raise InputError(
            f"--fp8-recipe {recipe}: autotune models {', '.join(FP8_RECIPES)} scaling"
        )
    return cast(Fp8Recipe, recipe)


FP8_RECIPES = ("delayed", "tensorwise", "mxfp8")


DELAY_WGRAD = "--delay-wgrad-compute"
"""The user's companion of the experts' overlap, which megatron-core refuses without it
("overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute"): kept
where the trial overlaps, dropped where it does not."""


def tuned_flags(spec: TrialSpec) -> list[str]:
    """The config's layout, batch and recomputation flags, as the megatron engine exports
    them."""
    groups = pretrain_gpt_flags(spec.workload, spec.config)[:2]
    delayed = spec.config.ep_comm_overlap and has_flag(spec.user_job.command, DELAY_WGRAD)
    return [word for _, lines in groups for line in lines for word in line.split()] + (
        [DELAY_WGRAD] if delayed else []
    )


def export_argv(spec: TrialSpec) -> list[str]:
    """The user's command with the tuned flags: their run length, checkpoints and the rest
    kept."""
    return [*without_flags(spec.user_job.command, TUNED), *tuned_flags(spec)]


def trial_argv(spec: TrialSpec) -> list[str]:
    """The command a trial runs: tuned flags, and just enough iterations, each logged."""
    plan = spec.steps
    iterations = plan.max_warmup + plan.measured_steps
    command = spec.user_job.command
    if has_flag(command, "--train-samples"):  # a sample-based schedule stays sample-based
        length = ["--train-samples", str(iterations * spec.workload.global_batch_size)]
        user_samples = flag_value(command, "--train-samples")
        if user_samples and not has_flag(command, "--lr-decay-samples"):
            length += ["--lr-decay-samples", user_samples]  # warm-up must stay below decay
    else:
        length = ["--train-iters", str(iterations)]
        user_iters = flag_value(command, "--train-iters")
        if user_iters and not has_flag(command, "--lr-decay-iters"):
            length += ["--lr-decay-iters", user_iters]  # the user's schedule, not the trial's
    return [
        *without_flags(command, TUNED | RUN_LENGTH),
        *tuned_flags(spec),
        *length,
        *["--log-interval", "1", "--eval-iters", "0"],
    ]


class MegatronLM(Framework):
    """`pretrain_gpt.py` and its forks: the model and batch read from the flags, the layout
    rewritten in place, steps read from Megatron-LM's own log."""

    name = "megatron"
    engine = "megatron"
    rank_module = "autotune.engines.megatron.job_worker"
    fallback = True

    def recognises(self, command: Sequence[str]) -> bool:
        return True

    def narrow(self, job: UserJob, problem: JobProblem) -> JobProblem:
        workload = workload_from_command(job.command, job.name)
        space = problem.derived(problem.engine_knobs, workload)
        for knob, flag in given_overlaps(job.command).items():
            if knob not in space.values:
                space = space.offering(knob, (False, True), f"your command gives {flag}")
        if runs_local_attention(job.command):
            space = without_transformer_engine(space, "--transformer-impl local")
        return dataclasses.replace(problem, workload=workload, space=space)

    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        args = folder / ARGS_FILE
        args.write_text(args_text(spec.workload, spec.config))
        snippet = folder / SNIPPET_FILE
        snippet.write_text(core_snippet(spec.workload, spec.config))
        return [args, snippet]

    def trial_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        return trial_argv(spec)

    def export_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        return export_argv(spec)
