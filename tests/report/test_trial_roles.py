"""The trial table says what each trial was for: a reader of the report or of `autotune
trials` tells a repeat, the winner's repeats, a scale probe and a full-size launch from the
search."""

from __future__ import annotations

from autotune.problem import load_problem
from autotune.report.table import trial_table
from autotune.study.record.trial_attrs import (
    AFTER_CHOICE,
    CONFIRMS,
    FULL_OF,
    RANKED_BY,
    SCALE_PROBE,
    TRIAL_NODES,
)
from tests.fakes import add_measured, new_study


def test_each_trial_says_what_it_was_for() -> None:
    p = load_problem("megatron", "llama3-8b", "dgx-h100:32", None)
    config, other = p.config({"tp": 8}), p.config({"tp": 4})
    study = new_study()
    sliced = {RANKED_BY: "slice", TRIAL_NODES: 4}
    first = add_measured(study, 1000.0, config, **sliced)
    add_measured(study, 900.0, other, **{RANKED_BY: "proxy", TRIAL_NODES: 4})
    add_measured(study, 990.0, config, **{SCALE_PROBE: first, TRIAL_NODES: 8})
    full = {RANKED_BY: "full", TRIAL_NODES: 32}
    add_measured(study, 980.0, config, **{FULL_OF: first}, **full)
    add_measured(study, 970.0, config, **{CONFIRMS: first, AFTER_CHOICE: True}, **full)
    add_measured(study, 960.0, config, **{CONFIRMS: first}, **sliced)
    roles = dict(zip(trial_table(study)["number"], trial_table(study)["role"], strict=True))
    assert roles == {
        0: "slice of 4 nodes",
        1: "proxy on 4 nodes",
        2: "scale probe of trial 0 on 8 nodes",
        3: "trial 0 at full size",
        4: "winner's repeat of trial 0 at full size",
        5: "repeat of trial 0",
    }
