"""A user's DeepSpeed script, and a Hugging Face Trainer script with `--deepspeed FILE`, as
the trial. Pure: no torch, no DeepSpeed.

A trial gets a ds_config made from the user's own file with the tuned keys overridden
(optimizer, scheduler, precision and everything else kept) and its config argument pointing
at it; the Trainer also gets its micro-batch and accumulation flags, which it checks against
the file. Trials run without the job's side effects (`side_effects.py`); the export keeps
them.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.engines.argv import flag_positions, flag_value, hf_flag, with_flag
from autotune.engines.deepspeed.ds_config import (
    DS_BUCKET,
    offloads_to_cpu,
    offloads_to_nvme,
    read_ds_config,
    whole,
    zero_section,
)
from autotune.engines.deepspeed.exports import DS_CONFIG_FILE
from autotune.engines.deepspeed.side_effects import hf_trial_argv, without_monitors
from autotune.engines.framework import Framework, JobProblem, with_workload
from autotune.errors import InputError
from autotune.space import SearchSpace, TrainConfig
from autotune.specs import Workload
from autotune.specs.workload import Precision
from autotune.trial.spec import TrialSpec, UserJob

CONFIG_FLAGS = ("--deepspeed_config", "--deepscale_config", "--deepspeed")
"""Where a DeepSpeed script takes its config file: DeepSpeed's own `add_config_arguments`
(`--deepspeed_config FILE`, or its deprecated `--deepscale_config FILE`, which
`deepspeed.initialize` takes in its place; its `--deepspeed` alone is a switch), or Hugging
Face's `TrainingArguments` (`--deepspeed FILE`)."""


HF_MBS = hf_flag("per_device_train_batch_size")
HF_ACCUM = hf_flag("gradient_accumulation_steps")
HF_BATCH = ((HF_MBS, "8"), (HF_ACCUM, "1"))
"""Hugging Face TrainingArguments' batch flags (every spelling) and their defaults
(transformers/training_args.py)."""
DEEPSPEED_KNOBS = frozenset(
    {"zero", "mbs", "reduce_bucket", "allgather_bucket", "overlap_comm", "nccl_algo", "nccl_proto"}
    | {"offload_optimizer", "offload_param"}
)
"""What a DeepSpeed script takes from its ds_config; its pipeline and recomputation are in
its own code, so they stay as the script has them."""


def find_config_argument(argv: Sequence[str]) -> int | None:
    """Index of the argument that holds the ds_config path (`--flag FILE` or `--flag=FILE`;
    the last one given)."""
    for flag in CONFIG_FLAGS:  # DeepSpeed's own flag first: `--deepspeed` may be a switch
        for at, value in reversed(flag_positions(argv, flag)):
            if value is None and "=" in argv[at]:
                return at
            if value is not None and not argv[value].startswith("-"):
                return value
    return None


def is_hugging_face(command: Sequence[str], config_index: int | None) -> bool:
    """The command hands its config to Hugging Face's Trainer (`--deepspeed FILE`), which
    takes the micro-batch and accumulation from its own flags and checks the file against
    them."""
    if config_index is None:
        return False
    argument = command[config_index]
    before = command[config_index - 1] if config_index else ""
    return argument.startswith("--deepspeed=") or before == "--deepspeed"


def script_source(job: UserJob) -> str:
    """The text of the user's script (`-m MODULE`: its file under the workdir, where it
    lies there); "" where it cannot be read."""
    workdir = Path(job.workdir)
    if job.command[0] == "-m":
        if len(job.command) < 2:
            return ""
        base = workdir / job.command[1].replace(".", "/")
        paths = [base.with_suffix(".py"), base / "__main__.py"]
    else:
        paths = [workdir / job.command[0]]
    for path in paths:
        try:
            return path.read_text(errors="replace")
        except OSError:
            continue
    return ""


def global_batch(job: UserJob, world_size: int) -> int:
    """Sequences per optimizer step the user's job asks for; trials keep it. A DeepSpeed
    script with a pipeline (its source mentions `PipelineModule`) must give train_batch_size:
    DeepSpeed counts its micro-batches over the data-parallel ranks, world / pp
    (`DeepSpeedConfig._set_batch_related_parameters`, deepspeed/runtime/config.py), and the
    pipeline degree is in the script's code, where autotune cannot read it."""
    base = job.base_config
    batch = base.get("train_batch_size")
    if isinstance(batch, int) and batch > 0:
        return batch
    hugging_face = is_hugging_face(job.command, job.config_index)
    if not hugging_face and "PipelineModule" in script_source(job):
        raise InputError(
            "your script builds a DeepSpeed PipelineModule and its ds_config gives no "
            "train_batch_size: give train_batch_size, autotune cannot read the pipeline "
            "degree from code"
        )
    mbs = base.get("train_micro_batch_size_per_gpu")
    accum = base.get("gradient_accumulation_steps", 1)
    if isinstance(mbs, int) and isinstance(accum, int) and mbs > 0 and accum > 0:
        return mbs * accum * world_size
    if hugging_face:  # "auto": the Trainer's flags decide
        given = {flag[0]: flag_value(job.command, flag) or default for flag, default in HF_BATCH}
        try:
            numbers = [int(value) for value in given.values()]
        except ValueError:
            raise InputError(f"batch flags must be whole numbers: {given}") from None
        return numbers[0] * numbers[1] * world_size
    raise InputError(
        "the DeepSpeed config sets no global batch: give train_batch_size, or "
        "train_micro_batch_size_per_gpu (and gradient_accumulation_steps) as numbers"
    )


def ds_precision(job: UserJob) -> Precision:
    """The precision the user's DeepSpeed config trains in (`"auto"`: the Trainer's --bf16 or
    --fp16 flag decides)."""
    halves: tuple[Precision, ...] = ("bf16", "fp16")
    for name in halves:
        section = job.base_config.get(name)
        enabled = section.get("enabled") if isinstance(section, dict) else None
        if enabled is True or (enabled == "auto" and f"--{name}" in job.command):
            return name
    return "fp32"


def _users_mbs(job: UserJob, world_size: int) -> int | None:
    """The micro-batch the user's job runs: the file's; else the Trainer's flag (its
    `trainer_config_process` fills "auto" from --per_device_train_batch_size); else as
    DeepSpeed derives it from train_batch_size and gradient_accumulation_steps over the
    data-parallel ranks (`DeepSpeedConfig._set_batch_related_parameters`,
    deepspeed/runtime/config.py; a script without a pipeline: every rank)."""
    base = job.base_config
    mbs = whole(base.get("train_micro_batch_size_per_gpu"))
    if mbs is not None:
        return mbs
    if is_hugging_face(job.command, job.config_index):
        return whole(flag_value(job.command, HF_MBS) or HF_BATCH[0][1])
    batch = whole(base.get("train_batch_size"))
    accum = whole(base.get("gradient_accumulation_steps")) or 1
    if batch is None or batch < world_size * accum:
        return None
    return batch // world_size // accum


def users_knobs(job: UserJob, workload: Workload, world_size: int) -> dict[str, Any]:
    """The knobs of the config the user's command runs today, as DeepSpeed runs it (a study
    measures it first): what the file sets, and DeepSpeed's own defaults for what it leaves
    out (`DeepSpeedZeroConfig`: stage 0, buckets of 5e8, overlap_comm true at stage 3 and
    false below (its `overlap_comm_valid`), no offload). Where the Trainer runs it, its
    "auto" values as transformers fills them (integrations/deepspeed.py): the micro-batch from
    its flag (`trainer_config_process`), reduce_bucket_size = hidden_size² of the model
    (`trainer_config_finalize`; `workload`'s). Values DeepSpeed would not take are left out.
    NVMe offload is no CPU offload."""
    zero = zero_section(job.base_config)
    stage = whole(zero.get("stage", 0))
    reduce = zero.get("reduce_bucket_size", DS_BUCKET)
    if trainer_fills_bucket(job):
        reduce = workload.hidden_size * workload.hidden_size
    found: dict[str, int | None] = {
        "zero": stage,
        "mbs": _users_mbs(job, world_size),
        "reduce_bucket": whole(reduce),
        "allgather_bucket": whole(zero.get("allgather_bucket_size", DS_BUCKET)),
    }
    knobs: dict[str, Any] = {k: v for k, v in found.items() if v is not None}
    overlap = zero.get("overlap_comm")
    overlap = stage == 3 if overlap is None else overlap
    if isinstance(overlap, bool):
        knobs["overlap_comm"] = overlap
    for offload in ("offload_optimizer", "offload_param"):
        knobs[offload] = offloads_to_cpu(zero.get(offload))
    return knobs


def trainer_fills_bucket(job: UserJob) -> bool:
    """The Trainer fills the file's "auto" reduce_bucket_size from the model's width: the
    user's value is known once the model is."""
    auto = zero_section(job.base_config).get("reduce_bucket_size") == "auto"
    return auto and is_hugging_face(job.command, job.config_index)


def trial_ds_config(job: UserJob, workload: Workload, config: TrainConfig) -> dict[str, Any]:
    """The user's config with the trial's knobs: the global batch stays the user's and the
    micro-batch is the trial's; DeepSpeed derives the accumulation from the two and the data
    parallel size (which the script's own pipeline, if any, decides). The Hugging Face
    Trainer checks all three against its flags, which the trial sets too (`trial_argv`)."""
    merged = copy.deepcopy(job.base_config)
    merged["train_batch_size"] = workload.global_batch_size
    merged["train_micro_batch_size_per_gpu"] = config.mbs
    if is_hugging_face(job.command, job.config_index):
        merged["gradient_accumulation_steps"] = config.grad_accum(workload.global_batch_size)
    else:
        merged.pop("gradient_accumulation_steps", None)
    zero = dict(zero_section(merged))
    zero["stage"] = config.zero
    zero["reduce_bucket_size"] = config.reduce_bucket
    zero["overlap_comm"] = config.overlap_comm
    if config.zero in (1, 2):
        zero["allgather_bucket_size"] = config.allgather_bucket
    else:
        zero.pop("allgather_bucket_size", None)
    for offload, on in (
        ("offload_optimizer", config.offload_optimizer),
        ("offload_param", config.offload_param),
    ):
        if offloads_to_nvme(zero.get(offload)):
            continue  # kept as the user wrote it: the offload knobs are CPU offload
        if on:  # the user's own settings (pinning, buffers) kept, the device the trial's
            zero[offload] = {**(zero.get(offload) or {}), "device": "cpu"}
        else:
            zero.pop(offload, None)
    merged["zero_optimization"] = zero
    return merged


def export_argv(spec: TrialSpec, config_path: str) -> list[str]:
    """The user's command with the tuned config: its config file replaced by `config_path`,
    for the Hugging Face Trainer also its micro-batch and accumulation flags, which must
    agree; everything else as the user wrote it."""
    job = spec.user_job
    argv = job.argv_with_config(config_path)
    if is_hugging_face(job.command, job.config_index):
        accum = spec.config.grad_accum(spec.workload.global_batch_size)
        argv = with_flag(argv, HF_MBS, str(spec.config.mbs))  # the user's, where given
        argv = with_flag(argv, HF_ACCUM, str(accum))
    return argv


def trial_argv(spec: TrialSpec, config_path: str) -> list[str]:
    """`export_argv` for a trial, whose config lies at `config_path` in its folder: a
    Trainer's also without the job's side effects (`side_effects.hf_trial_argv`)."""
    argv = export_argv(spec, config_path)
    job = spec.user_job
    if is_hugging_face(job.command, job.config_index):
        return hf_trial_argv(argv, Path(config_path).parent)
    return argv


def _users_offload(space: SearchSpace, job: UserJob) -> SearchSpace:
    """A ds_config that offloads keeps offloading in every trial unless the space file
    lists the knob: a model that fits only offloaded must not be tried without it. One that
    offloads to NVMe keeps its section as written (`trial_ds_config`) and the knob, which
    means CPU offload, is held off."""
    zero = zero_section(job.base_config)
    values, origins = dict(space.values), dict(space.origins)
    for knob in ("offload_optimizer", "offload_param"):
        if offloads_to_nvme(zero.get(knob)):
            values[knob] = (False,)
            origins[knob] = (
                "your ds_config offloads it to NVMe: kept as given in every trial, not modelled"
            )
        elif offloads_to_cpu(zero.get(knob)) and knob not in values:
            values[knob] = (True,)
            origins[knob] = "your ds_config offloads it (list it in --space to tune it)"
    return dataclasses.replace(space, values=values, origins=origins)


def with_users_values(space: SearchSpace, users: dict[str, Any]) -> SearchSpace:
    """`space` with each of the user's own knob values (`users_knobs`) among its knob's
    candidates, so that the config the user runs today is a trial the study can measure
    (Hugging Face's documented ZeRO-2 file has 2e8 buckets, which a space of 5e7 and 5e8
    would leave out). A knob the space does not list is held at the user's value rather
    than autotune's default. The offload knobs `_users_offload` holds are the user's
    already."""
    defaults = TrainConfig()
    for knob, value in users.items():
        held = space.values.get(knob)
        if held is None:
            if value != getattr(defaults, knob):
                space = space.offering(knob, (value,), "your ds_config (the space lists none)")
        elif value not in held:
            why = space.origins.get(knob) or space.source
            space = space.offering(knob, (*held, value), f"{why}, and your ds_config's {value}")
    return space


class DeepSpeedScript(Framework):
    """A script that calls `deepspeed.initialize` with the config its command names
    (`--deepspeed_config FILE`); a hook around DeepSpeed's step measures it."""

    name = "deepspeed"
    engine = "deepspeed"
    rank_module = "autotune.engines.deepspeed.job_worker"
    users_config_source = "your ds_config, as DeepSpeed fills it"
    forked = True
    fallback = True  # a command without a config file is told how to give one

    def recognises(self, command: Sequence[str]) -> bool:
        index = find_config_argument(command)
        return index is not None and not is_hugging_face(command, index)

    def parse(self, command: Sequence[str], workdir: Path) -> UserJob:
        index = find_config_argument(command)
        if index is None:
            raise InputError(
                "the command names no DeepSpeed config: give it as --deepspeed_config FILE "
                "(DeepSpeed) or --deepspeed FILE (Hugging Face)"
            )
        argument = command[index]
        value = argument.partition("=")[2] if argument.startswith("--") else argument
        return UserJob(
            command=tuple(command),
            framework=self.name,
            workdir=str(workdir),
            config_index=index,
            base_config=read_ds_config(workdir / value),
        )

    def narrow(self, job: UserJob, problem: JobProblem) -> JobProblem:
        if problem.workload.is_moe:
            raise InputError(
                f"{problem.workload.name}: your script's DeepSpeed-MoE layers set their "
                "ep_size in its code, where autotune cannot read or change it (tune the model "
                "without a command, or with --engine megatron)"
            )
        batch = global_batch(job, problem.cluster.world_size)
        workload = dataclasses.replace(problem.workload, global_batch_size=batch)
        narrowed = with_workload(problem, workload, DEEPSPEED_KNOBS)
        space = _users_offload(narrowed.space, job)
        users = users_knobs(job, workload, problem.cluster.world_size)
        if not problem.model_given and trainer_fills_bucket(job):
            del users["reduce_bucket"]  # the stand-in's width: `model_probe` reads the model's
        return dataclasses.replace(
            narrowed,
            space=with_users_values(space, users),
            reads_model=not problem.model_given,
        )

    def users_knobs(
        self, job: UserJob, workload: Workload, world_size: int
    ) -> dict[str, Any] | None:
        return users_knobs(job, workload, world_size)

    def write_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        config = trial_ds_config(spec.user_job, spec.workload, spec.config)
        return [_write_json(folder / DS_CONFIG_FILE, config)]

    def write_trial_files(self, spec: TrialSpec, folder: Path) -> list[Path]:
        config = trial_ds_config(spec.user_job, spec.workload, spec.config)
        return [_write_json(folder / DS_CONFIG_FILE, without_monitors(config))]

    def trial_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        return trial_argv(spec, config_path)

    def export_argv(self, spec: TrialSpec, config_path: str) -> list[str]:
        return export_argv(spec, config_path)


def _write_json(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


class HuggingFaceTrainer(DeepSpeedScript):
    """A Hugging Face Trainer script given `--deepspeed FILE`: the Trainer fills the file's
    "auto" values from its own flags, so a trial sets those flags too."""

    name = "huggingface"
    fallback = False
    users_config_source = "your Trainer flags and ds_config, as the Trainer fills them"

    def recognises(self, command: Sequence[str]) -> bool:
        return is_hugging_face(command, find_config_argument(command))
