"""A torchtitan training command (`-m torchtitan.train ...`) as the trial. Pure.

torchtitan takes its settings from a TOML file (`--job.config_file`) overridden by tyro
flags (`--section.field VALUE`). The trial's tensor-parallel degree, data-parallel kind
(DDP: `data_parallel_replicate_degree`; FSDP2: `data_parallel_shard_degree` with
`fsdp_reshard_after_forward` never for zero 2, always for zero 3; HSDP: both, the replicas
`hsdp`), local batch and activation
checkpointing are flags added after the user's own; the global batch, the pipeline degree and
the HSDP replicas stay the user's (`with_users_layout` pins them in the space). A
trial runs a fixed number of steps, each logged, without checkpoints, validation, metrics
reporting or profiling (`TRIAL_SETTINGS`); the export keeps them.

Steps are read from the metrics line of `MetricsProcessor.log` in
torchtitan/components/metrics.py at v0.2.2, which every rank prints (rank 0's is read):
it gives tokens per second per device, `tps = tokens since the last log / (seconds *
cp * tp * pp)`, over this rank's data-parallel share of the batch, so one step of the
global batch took `global_batch * seq_len / (tps * world size)` seconds; and the peak
memory reserved since the last log (`memory: X GiB`).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.engines.argv import flag_value, without_flags
from autotune.errors import InputError
from autotune.rank.logged import ANSI_COLOUR, Logged, LoggedMemory, LoggedStep
from autotune.space import SearchSpace
from autotune.trial.spec import TrialSpec

MODULE = "torchtitan.train"
KNOBS = frozenset({"tp", "zero", "mbs", "recompute", "nccl_algo", "nccl_proto"})
"""What a torchtitan command takes from the trial: its pipeline needs a schedule and
micro-batch settings of its own, sequence parallelism comes with tensor parallelism, and it
has no ZeRO-1 (zero 1 is left out of the space)."""
TUNED = {
    "--parallelism.tensor_parallel_degree": 1,
    "--parallelism.pipeline_parallel_degree": 1,
    "--parallelism.data_parallel_replicate_degree": 1,
    "--parallelism.data_parallel_shard_degree": 1,
    "--parallelism.fsdp_reshard_after_forward": 1,
    "--training.local_batch_size": 1,
    "--training.global_batch_size": 1,
    "--activation_checkpoint.mode": 1,
}
"""The user's flags the trial's config replaces (flag -> values it takes)."""
RUN_LENGTH = {
    "--training.steps": 1,
    "--metrics.log_freq": 1,
    "--metrics.disable_color_printing": 0,
    "--metrics.no_disable_color_printing": 0,
    "--checkpoint.enable": 0,
    "--checkpoint.no_enable": 0,
    "--validation.enable": 0,
    "--validation.no_enable": 0,
    **{f"--{name}": 0 for name in ("metrics.enable_tensorboard", "metrics.enable_wandb")},
    **{f"--metrics.no_{name}": 0 for name in ("enable_tensorboard", "enable_wandb")},
    **{f"--profiling.{name}": 0 for name in ("enable_profiling", "enable_memory_snapshot")},
    **{f"--profiling.no_{name}": 0 for name in ("enable_profiling", "enable_memory_snapshot")},
}
TRIAL_SETTINGS = [
    "--metrics.log_freq",
    "1",
    "--metrics.disable_color_printing",
    "--checkpoint.no_enable",
    "--validation.no_enable",
    "--metrics.no_enable_tensorboard",
    "--metrics.no_enable_wandb",
    "--profiling.no_enable_profiling",
    "--profiling.no_enable_memory_snapshot",
]
"""A metrics line per step without colours; nothing written to or read from checkpoints
(`Checkpoint.enable`: no initial load either), no validation, no TensorBoard or W&B
(`Metrics.enable_tensorboard`, `enable_wandb`), no profiler traces or memory snapshots
(`Profiling`), whatever the TOML says (config/job_config.py, v0.2.2). The export keeps the
user's."""
NOT_YET = {
    "--parallelism.context_parallel_degree": "context parallelism",
    "--parallelism.expert_parallel_degree": "expert parallelism",
}
DEFAULTS = {"local_batch_size": 8, "global_batch_size": -1, "seq_len": 2048}
"""torchtitan's `Training` defaults (config/job_config.py, v0.2.2)."""

METRICS = re.compile(
    r"(?<!validate )step:\s*\d+\s+loss:\s*([-+0-9.eE]+).*?memory:\s*([0-9.]+)GiB.*?tps: ([0-9,]+)"
)


def is_torchtitan(command: Sequence[str]) -> bool:
    """`-m torchtitan.train ...` or a torchtitan checkout's `torchtitan/train.py ...`."""
    if list(command[:2]) == ["-m", MODULE]:
        return True
    return Path(command[0]).as_posix().endswith("torchtitan/train.py")


def canonical(argv: Sequence[str]) -> list[str]:
    """Flag names with underscores, as torchtitan documents them (tyro takes both)."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            arg = "--" + name[2:].replace("-", "_") + eq + value
        out.append(arg)
    return out


def parse_line(line: str, spec: TrialSpec) -> Logged:
    """One step's seconds and the peak memory reserved since the previous metrics line."""
    match = METRICS.search(re.sub(ANSI_COLOUR, "", line))
    if not match:
        return ()
    memory = LoggedMemory(int(float(match.group(2)) * 2**30), "torchtitan_max_reserved")
    tps = int(match.group(3).replace(",", ""))
    if tps == 0:  # under half a token per second: no time to read
        return (memory,)
    tokens = spec.workload.global_batch_size * spec.workload.seq_length
    seconds = tokens / (tps * spec.cluster.world_size)
    return (LoggedStep(seconds, float(match.group(1))), memory)  # the global average loss


def reporting_rank(world_size: int) -> int:
    return 0


SECTIONS = ("training", "parallelism", "model")
PRESETS = {("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b"}
"""torchtitan's model flavors (models/llama3/__init__.py) that autotune has as presets."""


def _training_settings(argv: Sequence[str], workdir: Path) -> dict[str, Any]:
    """The `[training]`, `[parallelism]` and `[model]` settings: TOML first, flags over it."""
    settings: dict[str, Any] = {}
    toml = flag_value(argv, "--job.config_file")
    if toml:
        path = workdir / toml
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise InputError(f"torchtitan config {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise InputError(f"torchtitan config {path}: not a text file") from None
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"torchtitan config {path}: not TOML ({exc})") from None
        for section in SECTIONS:
            settings.update({f"{section}.{k}": v for k, v in data.get(section, {}).items()})
    for arg in argv:
        if arg.startswith(tuple(f"--{section}." for section in SECTIONS)):
            name = arg.partition("=")[0]
            settings[name[2:]] = flag_value(argv, name)
    return settings


def _whole(settings: dict[str, Any], key: str, default: int) -> int:
    value = settings.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InputError(f"torchtitan {key} = {value!r}: expected a whole number") from None


def batch_and_sequence(argv: Sequence[str], workdir: Path, world_size: int) -> tuple[int, int]:
    """The global batch (sequences per optimizer step) and sequence length the command
    trains with; a global batch of -1 is one local batch per data-parallel rank."""
    settings = _training_settings(canonical(argv), workdir)
    for flag, what in NOT_YET.items():
        if _whole(settings, flag[2:], 1) > 1:
            raise InputError(f"{flag}: tuning {what} in a torchtitan command is not supported yet")
    seq = _whole(settings, "training.seq_len", DEFAULTS["seq_len"])
    global_batch = _whole(settings, "training.global_batch_size", DEFAULTS["global_batch_size"])
    if global_batch > 0:
        return global_batch, seq
    local = _whole(settings, "training.local_batch_size", DEFAULTS["local_batch_size"])
    model_parallel = 1
    for degree in ("tensor_parallel_degree", "pipeline_parallel_degree"):
        model_parallel *= _whole(settings, f"parallelism.{degree}", 1)
    return local * max(1, world_size // model_parallel), seq


def users_layout(argv: Sequence[str], workdir: Path) -> tuple[int, int, int]:
    """The pipeline degree, HSDP replicas and pipeline micro-batch the command runs with, as
    torchtitan reads them (`Parallelism` in config/job_config.py: TOML, then flags; defaults
    pipeline 1, replicate 1, shard -1 "the ranks left", micro-batch 1). Replicas are HSDP
    only beside sharding (shard degree -1 or over 1); replicas over unsharded ranks are DDP,
    which the trial's zero 0 chooses."""
    settings = _training_settings(canonical(argv), workdir)
    pp = _whole(settings, "parallelism.pipeline_parallel_degree", 1)
    replicate = _whole(settings, "parallelism.data_parallel_replicate_degree", 1)
    shard = _whole(settings, "parallelism.data_parallel_shard_degree", -1)
    microbatch = _whole(settings, "parallelism.pipeline_parallel_microbatch_size", 1)
    for name, value in (("pipeline_parallel_degree", pp), ("replicate_degree", replicate)):
        if value < 1:
            raise InputError(f"torchtitan {name} = {value}: expected 1 or more")
    return pp, replicate if shard != 1 else 1, max(1, microbatch)


def with_users_layout(
    space: SearchSpace,
    argv: Sequence[str],
    workdir: Path,
    world_size: int,
    batch: int,
    derive_mbs: bool,
) -> SearchSpace:
    """`space` with pp and hsdp pinned to the command's own (autotune does not tune them in a
    torchtitan command, whose pipeline has a schedule of its own), so the model plans the
    layout that runs (dp = world / (tp·pp)). With a pipeline, the micro-batch candidates
    (with `derive_mbs`, the divisors of each data-parallel rank's share of the batch over
    world / pp ranks; else the space file's) are those that divide by the pipeline's
    micro-batch (`build_pipeline_schedule`
    in distributed/pipeline_parallel.py refuses a local batch that does not)."""
    pp, hsdp, microbatch = users_layout(argv, workdir)
    given = "your torchtitan command's {} (kept as given; not tuned)"
    if pp != 1:
        space = space.offering("pp", (pp,), given.format("pipeline_parallel_degree"))
        mbs = space.values.get("mbs", (1,))
        if derive_mbs:
            per_rank = max(1, batch // max(1, world_size // pp))
            mbs = tuple(m for m in range(1, per_rank + 1) if per_rank % m == 0)
        kept = tuple(m for m in mbs if m % microbatch == 0) or (microbatch,)
        space = space.offering(
            "mbs", kept, f"multiples of the pipeline's micro-batch ({microbatch}) in {mbs}"
        )
    if hsdp != 1:
        space = space.offering("hsdp", (hsdp,), given.format("data_parallel_replicate_degree"))
    return space


def without_zero1(space: SearchSpace) -> SearchSpace:
    """torchtitan has DDP and FSDP2, no ZeRO-1."""
    values = dict(space.values)
    values["zero"] = tuple(z for z in values.get("zero", (0, 2, 3)) if z != 1) or (3,)
    return dataclasses.replace(space, values=values)


def model_preset(argv: Sequence[str], workdir: Path) -> str | None:
    """autotune's preset of the model the command trains, when it has one."""
    settings = _training_settings(canonical(argv), workdir)
    name, flavor = settings.get("model.name", "llama3"), settings.get("model.flavor", "debugmodel")
    return PRESETS.get((str(name), str(flavor)))


def tuned_flags(spec: TrialSpec) -> list[str]:
    c = spec.config
    replicate, shard = (c.dp, 1) if c.zero == 0 else (c.hsdp, c.dp // c.hsdp)
    flags = [
        *["--parallelism.tensor_parallel_degree", str(c.tp)],
        *["--parallelism.pipeline_parallel_degree", str(c.pp)],
        *["--parallelism.data_parallel_replicate_degree", str(replicate)],
        *["--parallelism.data_parallel_shard_degree", str(shard)],
    ]
    if c.zero >= 2:
        reshard = "always" if c.zero == 3 else "never"
        flags += ["--parallelism.fsdp_reshard_after_forward", reshard]
    return [
        *flags,
        *["--training.local_batch_size", str(c.mbs)],
        *["--training.global_batch_size", str(spec.workload.global_batch_size)],
        *["--activation_checkpoint.mode", c.recompute],
    ]


def export_argv(spec: TrialSpec) -> list[str]:
    return [*without_flags(canonical(spec.user_job.command), TUNED), *tuned_flags(spec)]


def trial_argv(spec: TrialSpec) -> list[str]:
    steps = spec.steps.max_warmup + spec.steps.measured_steps
    return [
        *without_flags(canonical(spec.user_job.command), TUNED | RUN_LENGTH),
        *tuned_flags(spec),
        *["--training.steps", str(steps)],
        *TRIAL_SETTINGS,
    ]
