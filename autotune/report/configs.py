"""Every config a study ran, one row each: its standing (the mean of its launches that
choose, with its interval; for the winner, the figures every output states for it), how many
times it launched, its MFU, step time and peak memory, and whether it is the winner or the
user's own config: the view `autotune trials` shows by default (`report.table` keeps a row
per launch)."""

from __future__ import annotations

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from autotune.study.record.trial_attrs import USERS_CONFIG, TrialAttrs
from autotune.study.verdict.confirm import standings
from autotune.study.verdict.noise import study_spread
from autotune.study.verdict.winner import decide

COLUMNS = (
    "first",
    "label",
    "tokens_per_s",
    "interval",
    "launches",
    "mfu",
    "step_time_s",
    "peak_memory_bytes",
    "outcome",
    "winner",
    "yours",
)


def config_table(study: optuna.Study) -> pd.DataFrame:
    """One row per config that ran, best standing first, failed configs last."""
    between = study_spread(study)
    standing = {TrialAttrs.of(s.trial).config_key: s for s in standings(study)}
    verdict = decide(study)
    winner, figures = (verdict.winner, verdict.figures) if verdict else (None, None)
    yours = study.user_attrs.get(USERS_CONFIG)
    rows = []
    for first, launches in _by_config(study).items():
        s = standing.get(TrialAttrs.of(launches[0]).config_key)
        latest = max(launches, key=lambda t: t.number)
        attrs = TrialAttrs.of(s.trial if s is not None else latest)
        is_winner = None not in (winner, s) and winner.first == s.first  # type: ignore[union-attr]
        tokens, interval = (s.tokens_per_s, s.interval(between)) if s is not None else (None, None)
        if is_winner and figures is not None:  # the figure every output states for it
            tokens, interval = figures.tokens_per_s, figures.interval
        scale = tokens / s.trial.value if s is not None and tokens and s.trial.value else 1.0
        rows.append(
            {
                "first": first,
                "label": attrs.label,
                "tokens_per_s": tokens,
                "interval": interval,
                "launches": len(launches),
                "mfu": attrs.mfu * scale if attrs.mfu and s is not None else None,
                "step_time_s": attrs.step_time_s / scale if attrs.step_time_s and s else None,
                "peak_memory_bytes": max(
                    (m for t in launches if (m := TrialAttrs.of(t).peak_memory_bytes)),
                    default=None,
                ),
                "outcome": "ok" if s is not None else (TrialAttrs.of(latest).kind or "-"),
                "winner": is_winner,
                "yours": yours is not None and attrs.config_key == yours,
            }
        )
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    if frame.empty:
        return frame
    frame = frame.sort_values(
        ["winner", "tokens_per_s", "first"], ascending=[False, False, True], na_position="last"
    )
    return frame.reset_index(drop=True)


def _by_config(study: optuna.Study) -> dict[int, list[FrozenTrial]]:
    """Every launch that ran (completed or failed), grouped by its config's first trial."""
    first: dict[str, int] = {}
    grouped: dict[int, list[FrozenTrial]] = {}
    states = (TrialState.COMPLETE, TrialState.FAIL)
    for t in study.get_trials(deepcopy=False, states=states):
        key = TrialAttrs.of(t).config_key
        if key is None:
            continue
        number = first.setdefault(key, t.number)
        grouped.setdefault(number, []).append(t)
    return grouped
