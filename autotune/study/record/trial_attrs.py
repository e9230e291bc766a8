"""The Optuna user attributes autotune keeps on a trial, named once: the loop writes them
under these names and every reader (table, report, export, confirmation, dashboard, scripts)
reads them through `TrialAttrs`, typed, so no reader spells a key."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from optuna.trial import FrozenTrial, TrialState

from autotune.space import TrainConfig

if TYPE_CHECKING:
    import optuna

CONFIG = "config"
"""The trial's knobs, as `TrainConfig.as_dict()`."""
CONFIG_KEY = "config_key"
"""The config's identity (`space.config_key`), set once the trial runs: its verdict."""
CLAIM = "claim"
"""The config a running trial holds, so two workers never measure it both."""
KIND = "kind"
"""The outcome kind: ok, oom, crash, ... (`trial.spec.OUTCOMES`), interrupted, or differs (a
config that trains another model than the user's: `study/verdict/parity.py`)."""
ERROR = "error"
COMMAND = "command"
"""The command line the trial launched."""
QUEUE = "queue_s"
"""Seconds the trial waited for resources before it started (a SLURM queue)."""
CONFIRMS = "confirms"
"""On a confirmation: the number of the trial it re-measures for longer."""
AFTER_CHOICE = "after_choice"
"""On a repeat of the chosen winner taken once the choice was made: it states the winner's
figures and takes no part in choosing (`study.verdict.figures`)."""
SCALE_PROBE = "scale_probe_of"
"""On a slice study's scale probe: the number of the slice trial whose config it measures
again on twice the slice's nodes. It tells how the extrapolation misses as the nodes grow
(`study.slice.scale`) and stands for no config of its own."""
SOURCE = "source"
"""measured, simulated or replayed."""
LABEL = "label"
OWNER = "owner"
"""Host, pid and start time of the tuner that runs the trial."""
FOLDER = "folder"
PREDICTED = "predicted"
"""The model's step time, memory and step breakdown for the config."""
SEEDED_BY = "seeded_by"
PRUNED_AS = "pruned_as"
"""Why a trial is PRUNED, as a `Pruned` value; `PRUNED_REASON` says it in words."""
PRUNED_REASON = "pruned_reason"
WALL = "wall_s"
"""The trial's wall time as its launcher saw it, from launch to the processes' end."""
PHASES = "phases_s"
"""The worker's clock: seconds per phase of a measured trial (`TrialResult.phases_s`)."""
NOISE_PRIOR = "noise_prior"
"""On the study: the cluster's between-trial spread from earlier studies (`noise.Spread` as a
dict), pooled with the study's own repeats in every verdict."""
USERS_CONFIG = "users_config"
"""On the study: the config key of the config the user's own command runs today (measured
first; the summary compares the winner with it)."""
USERS_CONFIG_FROM = "users_config_from"
"""On the study: where the user's config came from, in words (their ds_config, the Trainer's
flags, `--users-config`, the space file's `yours:`)."""
NODE_CHECK = "node_check"
"""Study attribute: the node check before the study (`autotune.nodes`), its readings and the
nodes kept out of trials."""
LAUNCHED_THROUGH = "launched_through"
"""Study attribute: the launchers that ran its trials, by name; their own files are exported
(`Launcher.export_files`: SLURM's train.sbatch)."""
NO_REFERENCE = "no_reference"
"""On the study: why no run of the user's config can be the loss-parity reference (it is not
known, not in the space, or failed every time it ran); nothing is then judged."""
PARITY_RESEED = "parity_reseed"
"""On a run of the user's config: the seed its ranks took after the first optimizer step
(`study/verdict/parity.py`: the second reference run, whose drift from the first sets the
floor)."""
ONE_KNOB = "one_knob"
"""On a trial that moves one knob of the user's config alone, to tell which move breaks
parity (`study/verdict/parity_cause.py`): that knob's name."""
CHOSEN_FOR = "chosen_for"
"""On a trial the guided search proposed: why, in words (`study/search/_chosen_for.py`)."""
PROMISED = "promised_share"
"""On a trial the guided search proposed, tuning for a production run: the share of that run
it was expected to save when chosen (`study/search/economics.py: kept_promise`)."""
SWEPT = "swept"
"""Processes the trial left running on the tuner's host, stopped once it ended (`name (pid N)`
each)."""
SLOW_NODES = "slow_nodes"
"""On a `slow_node` trial: the nodes it found slow. A node is kept out of later trials once a
second trial finds it slow too (`study/trial_run.stop_after`)."""
STOPPED_FOR = "stopped_for"
"""Why a measured trial stopped measuring (`trial.length`): precise, slower or cap."""


class Pruned(StrEnum):
    """Optuna's PRUNED state stands for three things here."""

    REJECTED = "rejected"
    """Not run: it breaks a rule, is predicted not to fit, or its config has a verdict."""
    CLAIMED = "claimed"
    """Not run: another worker holds the config (or took the queued trial)."""
    STOPPED_EARLY = "stopped_early"
    """Ran, and was stopped once clearly slower than the best: only in studies stored by a
    version whose trials did not measure their own length (such a trial completes, with
    `STOPPED_FOR` slower)."""


@dataclass(frozen=True)
class Prediction:
    """The model's figures for a trial's config (`PREDICTED`), kept beside what it measured."""

    step_time_s: float
    memory_bytes: float | None = None
    step: dict[str, float] = field(default_factory=dict, hash=False)
    """The step time's parts (`StepTime.as_dict`)."""

    def as_attr(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class HasUserAttrs(Protocol):
    """A live `optuna.Trial` or a `FrozenTrial`: both carry the attributes."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TrialAttrs:
    """A trial's user attributes, typed: None where the trial has no such attribute (a
    trial that never ran has no config, a failed one no figures, an old study lacks newer
    attributes)."""

    values: Mapping[str, Any]

    @classmethod
    def of(cls, trial: HasUserAttrs) -> TrialAttrs:
        return cls(trial.user_attrs)

    @property
    def config_values(self) -> dict[str, Any] | None:
        """The knobs as stored (`TrainConfig.as_dict()`), readable whatever knobs this
        version has."""
        return self.values.get(CONFIG)

    @property
    def config(self) -> TrainConfig:
        """The trial's config; KeyError on a trial that never ran (it has none)."""
        return TrainConfig(**self.values[CONFIG])

    @property
    def config_key(self) -> str | None:
        return self.values.get(CONFIG_KEY)

    @property
    def owner(self) -> str:
        """The tuner process running this trial (host:pid), or "" before one claimed it."""
        return str(self.values.get(OWNER, ""))

    @property
    def claim(self) -> str | None:
        return self.values.get(CLAIM)

    @property
    def kind(self) -> str | None:
        return self.values.get(KIND)

    @property
    def error(self) -> str | None:
        return self.values.get(ERROR)

    @property
    def confirms(self) -> int | None:
        return self.values.get(CONFIRMS)

    @property
    def after_choice(self) -> bool:
        return bool(self.values.get(AFTER_CHOICE))

    @property
    def scale_probe_of(self) -> int | None:
        return self.values.get(SCALE_PROBE)

    @property
    def source(self) -> str | None:
        return self.values.get(SOURCE)

    @property
    def label(self) -> str | None:
        return self.values.get(LABEL)

    @property
    def predicted(self) -> Prediction | None:
        stored = self.values.get(PREDICTED)
        if stored is None:
            return None
        return Prediction(
            stored["step_time_s"], stored.get("memory_bytes"), stored.get("step") or {}
        )

    @property
    def pruned_as(self) -> Pruned | None:
        """As stored; `pruned_as(trial)` also reads studies from before the attribute."""
        stored = self.values.get(PRUNED_AS)
        return Pruned(stored) if stored is not None else None

    @property
    def pruned_reason(self) -> str | None:
        return self.values.get(PRUNED_REASON)

    @property
    def wall_s(self) -> float | None:
        return self.values.get(WALL)

    @property
    def phases_s(self) -> dict[str, float] | None:
        return self.values.get(PHASES)

    @property
    def swept(self) -> tuple[str, ...]:
        return tuple(self.values.get(SWEPT) or ())

    @property
    def stopped_for(self) -> str | None:
        return self.values.get(STOPPED_FOR)

    # The measured figures (`TrialResult.figures()`), under their field names.
    @property
    def step_time_s(self) -> float | None:
        return self.values.get("step_time_s")

    @property
    def step_time_stdev_s(self) -> float | None:
        return self.values.get("step_time_stdev_s")

    @property
    def tokens_per_s(self) -> float | None:
        return self.values.get("tokens_per_s")

    @property
    def tflops_per_device(self) -> float | None:
        return self.values.get("tflops_per_device")

    @property
    def mfu(self) -> float | None:
        return self.values.get("mfu")

    @property
    def peak_memory_bytes(self) -> float | None:
        return self.values.get("peak_memory_bytes")

    @property
    def model_state_bytes(self) -> float | None:
        return self.values.get("model_state_bytes")

    @property
    def profile(self) -> dict[str, float] | None:
        return self.values.get("profile")

    @property
    def measured_steps(self) -> int | None:
        return self.values.get("measured_steps")

    @property
    def interval(self) -> float | None:
        return self.values.get("interval")

    @property
    def nccl_version(self) -> str | None:
        return self.values.get("nccl_version")

    @property
    def losses(self) -> tuple[float, ...]:
        """The loss of each step from the first (`TrialResult.losses`); () where not known."""
        return tuple(self.values.get("losses") or ())


def pruned_as(trial: FrozenTrial) -> Pruned | None:
    """Why a trial was pruned; studies from before the attribute: a trial that ran (it has a
    config key) was stopped early, any other was not run."""
    if trial.state != TrialState.PRUNED:
        return None
    attrs = TrialAttrs.of(trial)
    if attrs.pruned_as is not None:
        return attrs.pruned_as
    return Pruned.STOPPED_EARLY if attrs.config_key is not None else Pruned.REJECTED


# A slice study's (`autotune run --trial-nodes N`, `study/slice/`).
TRIAL_NODES = "trial_nodes"
"""On a trial: the nodes it ran on (the slice's, or the cluster's at full size; 0 for one
the model ranked, which ran nowhere)."""
RANKED_BY = "ranked_by"
"""On a trial of a slice study: `slice` (measured on the slice, extrapolated), `proxy`
(measured on the slice with fewer layers per stage), `model` (ranked by the model alone) or
`full` (measured at full size)."""
GUESSED = ("slice", "proxy", "model")
"""The `RANKED_BY` values of a trial whose tokens/s is a guess at full size: extrapolated from
the slice or a proxy, or the model's own; the rest (`full`) were measured there."""
PROXY = "proxy"
"""On a proxy trial: the proxy it measured ({"pp": stages, "layers": layers})."""
RANKED_WHY = "ranked_why"
"""On a model-ranked trial: why the slice could not measure it; on a proxy trial: what
stood in."""
SLICE_TOKENS = "slice_tokens_per_s"
"""On a slice trial: the tokens/s the slice measured (its value is the extrapolation)."""
SLICE_STUDY = "trial_nodes"
"""On the study: the slice's node count."""
SLICE_ERROR = "slice_to_full_error"
"""On the study: the slice-to-full error its full-size trials measured (`slice.confirm`)."""
FULL_OF = "full_size_of"
"""On a full-size confirmation: the number of the trial it measures at full size."""


def launched_through(study: optuna.Study, launcher: str) -> None:
    """Record that `launcher` runs the study's trials (once a launcher)."""
    used = launchers_of(study)
    if launcher not in used:
        study.set_user_attr(LAUNCHED_THROUGH, [*used, launcher])


def launchers_of(study: optuna.Study) -> tuple[str, ...]:
    """The launchers that ran the study's trials (none known: a study stored before)."""
    used = study.user_attrs.get(LAUNCHED_THROUGH)
    return tuple(str(u) for u in used) if isinstance(used, list) else ()
