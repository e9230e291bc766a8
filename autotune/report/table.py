"""Every trial of a study as one pandas table, best first."""

from __future__ import annotations

import optuna
import pandas as pd
from optuna.trial import TrialState

from autotune.study.choices import CHOICES_ATTR
from autotune.study.record.trial_attrs import (
    CHOSEN_FOR,
    FULL_OF,
    RANKED_BY,
    TRIAL_NODES,
    USERS_CONFIG,
    Pruned,
    TrialAttrs,
    pruned_as,
)
from autotune.study.verdict.confirm import Standing, standings

COLUMNS = (
    "number",
    "status",
    "role",
    "kind",
    "tokens_per_s",
    "mfu",
    "step_time_s",
    "interval",
    "measured_steps",
    "stopped_for",
    "peak_memory_bytes",
    "model_state_bytes",
    "source",
    "error",
)


def trial_table(study: optuna.Study) -> pd.DataFrame:
    """One row per trial that ran (rejected proposals are left out): knobs that vary in the
    study, status and outcome kind, measured metrics; sorted by tokens/s, failures last."""
    knobs = list(study.user_attrs.get(CHOICES_ATTR, {}))
    rows = []
    for t in study.get_trials(deepcopy=False):
        if pruned_as(t) in (Pruned.REJECTED, Pruned.CLAIMED):
            continue  # not run: rejected before running, or another worker's config
        attrs = TrialAttrs.of(t)
        if t.state == TrialState.RUNNING and attrs.config_values is None:
            continue
        config = attrs.config_values if attrs.config_values is not None else t.params
        row = {k: config.get(k) for k in knobs}
        pruned = "pruned" if t.state == TrialState.PRUNED else None
        row.update(
            {
                "number": t.number,
                "status": t.state.name.lower(),
                "role": trial_role(t),
                "kind": attrs.kind if attrs.kind is not None else pruned,
                "tokens_per_s": t.value if t.state == TrialState.COMPLETE else None,
                "mfu": attrs.mfu,
                "step_time_s": attrs.step_time_s,
                "interval": attrs.interval,
                "measured_steps": attrs.measured_steps,
                "stopped_for": attrs.stopped_for,
                "peak_memory_bytes": attrs.peak_memory_bytes,
                "model_state_bytes": attrs.model_state_bytes,
                "source": attrs.source,
                "error": attrs.error or attrs.pruned_reason,
                "label": attrs.label,
            }
        )
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["number", *knobs, *COLUMNS[1:], "label"])
    if frame.empty:
        return frame
    frame = frame.sort_values(
        ["tokens_per_s", "number"], ascending=[False, True], na_position="last"
    )
    return frame.reset_index(drop=True)


def trial_role(t: optuna.trial.FrozenTrial) -> str:
    """What the trial was for, in words: a search trial (in a slice study, where it ran), a
    repeat of another trial, the winner's repeat after its choice, a slice study's scale
    probe or full-size launch."""
    attrs = TrialAttrs.of(t)
    nodes, ranked_by = t.user_attrs.get(TRIAL_NODES), t.user_attrs.get(RANKED_BY)
    on = f" on {nodes} nodes" if nodes else ""
    if attrs.scale_probe_of is not None:
        return f"scale probe of trial {attrs.scale_probe_of}{on}"
    if (full := t.user_attrs.get(FULL_OF)) is not None:
        return f"trial {full} at full size"
    where = " at full size" if ranked_by == "full" else ""
    if attrs.confirms is not None:
        whose = "winner's repeat" if attrs.after_choice else "repeat"
        return f"{whose} of trial {attrs.confirms}{where}"
    if ranked_by == "full":
        return "full size"
    if ranked_by == "model":
        return "ranked by the model"
    if ranked_by == "proxy":
        return f"proxy on {nodes} nodes"
    if ranked_by == "slice":
        return f"slice of {nodes} nodes"
    why = t.user_attrs.get(CHOSEN_FOR)
    return f"search: {why}" if why else "search"


def users_config_trial(study: optuna.Study) -> Standing | None:
    """The standing of the config the user's own command runs today, when the study
    measured it."""
    key = study.user_attrs.get(USERS_CONFIG)
    if key is None:
        return None
    return next((s for s in standings(study) if TrialAttrs.of(s.trial).config_key == key), None)
