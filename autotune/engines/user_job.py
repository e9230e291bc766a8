"""The user's own training command as the trial (`autotune run -- train.py ...`).

Pure: no torch, no DeepSpeed. Which framework the command is decides how a trial hands it
the config: a DeepSpeed script gets a ds_config made from the user's own file with the tuned
keys overridden (optimizer, scheduler, precision and everything else kept) and its config
argument pointing at it; a script tuned through `autotune.step` a JSON file of knobs;
Megatron-LM and torchtitan their flags rewritten (megatron_job, torchtitan_job).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engines import megatron_job, torchtitan_job
from autotune.engines.argv import flag_positions, flag_value, with_flag
from autotune.engines.logged import Logged
from autotune.errors import InputError
from autotune.space import SearchSpace, TrainConfig
from autotune.specs import Workload
from autotune.specs.workload import Precision
from autotune.trial.spec import JobFramework, TrialSpec, UserJob

CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed")
"""Where a DeepSpeed script takes its config file: DeepSpeed's own `add_config_arguments`
(`--deepspeed_config FILE`; its `--deepspeed` alone is a switch), or Hugging Face's
`TrainingArguments` (`--deepspeed FILE`)."""
LAUNCHER_WORDS = frozenset({"deepspeed", "torchrun", "accelerate", "mpirun", "srun"})
HF_BATCH = (("--per_device_train_batch_size", "8"), ("--gradient_accumulation_steps", "1"))
"""Hugging Face TrainingArguments' batch flags and their defaults."""
KNOBS_FILE = "autotune_config.json"
"""The trial's knobs, for a script tuned through autotune.step."""
DEEPSPEED_KNOBS = frozenset(
    {"zero", "mbs", "reduce_bucket", "allgather_bucket", "overlap_comm", "nccl_algo", "nccl_proto"}
    | {"offload_optimizer", "offload_param"}
)
"""What a DeepSpeed script takes from its ds_config; its pipeline and recomputation are in
its own code, so they stay as the script has them."""


@dataclass(frozen=True)
class LoggingFramework:
    """A framework whose command takes the trial's config as flags and whose steps are read
    from its own log lines (Megatron-LM, torchtitan)."""

    trial_argv: Callable[[TrialSpec], list[str]]
    export_argv: Callable[[TrialSpec], list[str]]
    parse_line: Callable[[str, TrialSpec], Logged]
    reporting_rank: Callable[[int], int]
    """Which rank prints the step lines, for a world size."""


LOGGING_FRAMEWORKS: dict[str, LoggingFramework] = {
    "megatron": LoggingFramework(
        megatron_job.trial_argv,
        megatron_job.export_argv,
        megatron_job.parse_line,
        megatron_job.reporting_rank,
    ),
    "torchtitan": LoggingFramework(
        torchtitan_job.trial_argv,
        torchtitan_job.export_argv,
        torchtitan_job.parse_line,
        torchtitan_job.reporting_rank,
    ),
}


def framework_for(engine: str, command: Sequence[str]) -> JobFramework:
    """The framework a command is tuned as, from the engine chosen and the command."""
    if engine == "deepspeed":
        return "deepspeed"
    if engine == "megatron":
        return "megatron"
    return "torchtitan" if torchtitan_job.is_torchtitan(command) else "script"


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


def parse_job(argv: Sequence[str], workdir: Path, engine: str) -> UserJob:
    """The user's command, checked: a script or module, and for a DeepSpeed script a
    readable ds_config that trials replace."""
    command = list(argv)
    if command and re.fullmatch(r"python[\d.]*", Path(command[0]).name):
        command = command[1:]
    if not command:
        raise InputError("after --, give your training script and its arguments")
    if command[0].startswith("-") and command[0] != "-m":
        raise InputError(
            f"interpreter option {command[0]!r}: give the script (or -m MODULE) right after "
            "python; set Python options in the environment (e.g. PYTHONUNBUFFERED)"
        )
    if Path(command[0]).name in LAUNCHER_WORDS:
        raise InputError(
            f"autotune starts the ranks itself (torchrun): drop {command[0]!r} and give the "
            "script, e.g. `-- train.py --deepspeed_config ds_config.json`"
        )
    if command[0] == "-m":
        if len(command) < 2:
            raise InputError("after -- -m, name the module to run")
    elif not (workdir / command[0]).is_file():
        raise InputError(f"training script {command[0]!r} does not exist in {workdir}")
    framework = framework_for(engine, command)
    if framework != "deepspeed":
        return UserJob(command=tuple(command), framework=framework, workdir=str(workdir))
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
        framework=framework,
        workdir=str(workdir),
        config_index=index,
        base_config=read_ds_config(workdir / value),
    )


def write_knobs_file(spec: TrialSpec, folder: Path) -> Path:
    """The trial's knobs for a script that reads them itself ($AUTOTUNE_CONFIG)."""
    w, c = spec.workload, spec.config
    knobs = {
        **c.as_dict(),
        "grad_accum": c.grad_accum(w.global_batch_size),
        "global_batch_size": w.global_batch_size,
        "world_size": spec.cluster.world_size,
    }
    path = folder / KNOBS_FILE
    path.write_text(json.dumps(knobs, indent=2) + "\n")
    return path


def read_ds_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"DeepSpeed config {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"DeepSpeed config {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"DeepSpeed config {path}: expected a JSON object")
    return data


def is_hugging_face(job: UserJob) -> bool:
    """The command hands its config to Hugging Face's Trainer (`--deepspeed FILE`), which
    takes the micro-batch and accumulation from its own flags and checks the file against
    them."""
    if job.config_index is None:
        return False
    argument = job.command[job.config_index]
    before = job.command[job.config_index - 1] if job.config_index else ""
    return argument.startswith("--deepspeed=") or before == "--deepspeed"


def global_batch(job: UserJob, world_size: int) -> int:
    """Sequences per optimizer step the user's job asks for; trials keep it."""
    base = job.base_config
    batch = base.get("train_batch_size")
    if isinstance(batch, int) and batch > 0:
        return batch
    mbs = base.get("train_micro_batch_size_per_gpu")
    accum = base.get("gradient_accumulation_steps", 1)
    if isinstance(mbs, int) and isinstance(accum, int) and mbs > 0 and accum > 0:
        return mbs * accum * world_size
    if is_hugging_face(job):  # "auto" in the file: the Trainer's flags (and their defaults)
        given = {flag: flag_value(job.command, flag) or default for flag, default in HF_BATCH}
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


def users_knobs(job: UserJob) -> dict[str, Any]:
    """The knobs the user's own DeepSpeed config sets (its ZeRO stage, micro-batch, buckets
    and overlap; the Trainer's micro-batch flag where the file says "auto"): the config they
    run today, which a study measures first. Unset or "auto" values are left out."""
    base = job.base_config
    zero = base.get("zero_optimization") or {}
    found: dict[str, Any] = {
        "zero": zero.get("stage", 0) if isinstance(zero, dict) else None,
        "mbs": base.get("train_micro_batch_size_per_gpu"),
    }
    if isinstance(zero, dict):
        found["reduce_bucket"] = zero.get("reduce_bucket_size")
        found["allgather_bucket"] = zero.get("allgather_bucket_size")
        found["overlap_comm"] = zero.get("overlap_comm")
        for offload in ("offload_optimizer", "offload_param"):
            found[offload] = _offloads_to_cpu(zero.get(offload))
    if not isinstance(found["mbs"], int) and is_hugging_face(job):
        found["mbs"] = flag_value(job.command, HF_BATCH[0][0]) or HF_BATCH[0][1]
    knobs: dict[str, Any] = {}
    for name, value in found.items():
        if name in ("overlap_comm", "offload_optimizer", "offload_param"):
            if isinstance(value, bool):
                knobs[name] = value
        elif isinstance(value, int) and not isinstance(value, bool):
            knobs[name] = value
        elif (isinstance(value, float) and value.is_integer()) or (  # 5e8 in the JSON
            isinstance(value, str) and value.isdigit()
        ):
            knobs[name] = int(value)
    return knobs


def trial_argv(spec: TrialSpec, config_path: str) -> list[str]:
    """The user's command for a trial: Megatron-LM's and torchtitan's flags rewritten; a
    DeepSpeed script's config file replaced by `config_path`, for the Hugging Face Trainer
    also its micro-batch and accumulation flags, which must agree."""
    assert spec.job is not None
    if logging := LOGGING_FRAMEWORKS.get(spec.job.framework):
        return logging.trial_argv(spec)
    argv = spec.job.argv_with_config(config_path)
    if is_hugging_face(spec.job):
        accum = spec.config.grad_accum(spec.workload.global_batch_size)
        (mbs_flag, _), (accum_flag, _) = HF_BATCH
        argv = with_flag(argv, mbs_flag, str(spec.config.mbs))
        argv = with_flag(argv, accum_flag, str(accum))
    return argv


def export_argv(spec: TrialSpec, config_path: str) -> list[str]:
    """The user's command with the tuned config, for training: as a trial runs it, but a
    Megatron-LM or torchtitan command keeps its own length, logging and checkpoints."""
    assert spec.job is not None
    if logging := LOGGING_FRAMEWORKS.get(spec.job.framework):
        return logging.export_argv(spec)
    return trial_argv(spec, config_path)


def trial_ds_config(job: UserJob, workload: Workload, config: TrainConfig) -> dict[str, Any]:
    """The user's config with the trial's knobs: the global batch stays the user's and the
    micro-batch is the trial's; DeepSpeed derives the accumulation from the two and the data
    parallel size (which the script's own pipeline, if any, decides). The Hugging Face
    Trainer checks all three against its flags, which the trial sets too (`trial_argv`)."""
    merged = copy.deepcopy(job.base_config)
    merged["train_batch_size"] = workload.global_batch_size
    merged["train_micro_batch_size_per_gpu"] = config.mbs
    if is_hugging_face(job):
        merged["gradient_accumulation_steps"] = config.grad_accum(workload.global_batch_size)
    else:
        merged.pop("gradient_accumulation_steps", None)
    zero = dict(merged.get("zero_optimization") or {})
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
        if on:  # the user's own settings (pinning, buffers) kept, the device the trial's
            zero[offload] = {**(zero.get(offload) or {}), "device": "cpu"}
        else:
            zero.pop(offload, None)
    merged["zero_optimization"] = zero
    return merged


def _offloads_to_cpu(section: object) -> bool | None:
    """Whether a ds_config offload section sends states to the CPU (None: not stated; NVMe
    offload is not modelled and reads as no CPU offload)."""
    if section is None:
        return None
    return isinstance(section, dict) and section.get("device") == "cpu"


def job_space(
    space: SearchSpace,
    knobs: frozenset[str],
    workload: Workload,
    world_size: int,
    derive_mbs: bool,
) -> SearchSpace:
    """The engine's space narrowed to the `knobs` a command takes from the trial: others
    keep their defaults. With `derive_mbs` (no space file given) micro-batches are every
    divisor of each rank's share of the batch, as DeepSpeed's autotuner tries."""
    values = {k: v for k, v in space.values.items() if k in knobs}
    ignored = [k for k, v in space.values.items() if k not in knobs and len(v) > 1]
    if ignored and not derive_mbs:
        raise InputError(
            f"{space.source}: the command sets {', '.join(sorted(ignored))} in its own "
            f"code, not from the trial; tunable: {', '.join(sorted(knobs))}"
        )
    origins = {k: v for k, v in space.origins.items() if k in values}
    if derive_mbs:
        per_rank = max(1, workload.global_batch_size // world_size)
        values["mbs"] = tuple(m for m in range(1, per_rank + 1) if per_rank % m == 0)
        origins["mbs"] = f"divisors of each rank's share ({per_rank}) of the command's batch"
    return SearchSpace(
        engine=space.engine, values=values, source=f"{space.source} (command)", origins=origins
    )
