"""The summary `autotune run` ends with: the winner and its figures (`study.verdict.figures`), the
loss-parity verdict (`study.verdict.parity_verdict`), failures, where the time went, the files."""

from __future__ import annotations

from typing import Any

import optuna
from rich.console import Console
from rich.markup import escape

from autotune.study.verdict.winner import Verdict
from autotune.units import display_label


def study_summary(console: Console, study: optuna.Study, ref: Any, exported: list[Any]) -> None:
    """Best config and its figures, speed-up over the median and worst, failures by kind."""
    from optuna.trial import TrialState

    from autotune.nodes.judge import NodeCheck
    from autotune.report.cost import cost_line, study_cost
    from autotune.report.table import trial_table as table_of
    from autotune.study.record.storage import masked_url
    from autotune.study.record.trial_attrs import NODE_CHECK, TrialAttrs
    from autotune.study.search.economics import study_lines
    from autotune.study.verdict.winner import decide

    frame = table_of(study)
    ok = frame[frame["status"] == "complete"]
    failed = frame[frame["status"] == "fail"]
    verdict = decide(study)
    if ok.empty or verdict is None:
        console.print(f"[red]no trial succeeded[/] ({len(failed)} failed)")
    else:
        _winner(console, ok, verdict)
        for line in study_lines(study, verdict.figures):
            console.print(escape(line))
    for line in parity_lines(study):
        console.print(escape(line))
    if not failed.empty:
        kinds = failed["kind"].value_counts().to_dict()
        console.print("failures: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        attrs = TrialAttrs.of(t)
        if attrs.confirms is not None:
            console.print(
                f"[yellow]a repeat of trial {attrs.confirms} failed[/] "
                f"({attrs.kind}: {attrs.error}): that config "
                "does not stand unless a later repeat succeeds"
            )
    for t in study.get_trials(deepcopy=False):
        if swept := TrialAttrs.of(t).swept:
            console.print(
                f"[yellow]trial {t.number} left processes running, stopped after it:[/] "
                + escape(", ".join(swept))
            )
    if (checked := study.user_attrs.get(NODE_CHECK)) is not None:
        console.print(escape(NodeCheck.from_dict(checked).line()))
    cost = study_cost(study)
    if cost is not None:
        console.print(cost_line(cost))
    stopped = frame[(frame["status"] == "pruned") | (frame["stopped_for"] == "slower")]
    if not stopped.empty:
        console.print(f"stopped early (surely slower than the best): {len(stopped)}")
    console.print(f"files: {ref.folder} (trials/, best/), storage {masked_url(ref.storage_url)}")
    if exported:
        console.print("exported: " + ", ".join(p.name for p in exported))


def parity_lines(study: Any) -> list[str]:
    """The summary's loss-parity lines, for a study of the user's command that knows their
    config or says why not (`study.verdict.parity_verdict`)."""
    from autotune.export.best import exported_trial
    from autotune.study.record.storage import stored_job, stored_specs
    from autotune.study.record.trial_attrs import NO_REFERENCE, USERS_CONFIG, TrialAttrs
    from autotune.study.verdict.parity_verdict import study_parity

    if stored_job(study) is None:
        return []
    if not {USERS_CONFIG, NO_REFERENCE} & set(study.user_attrs):
        return []
    trial = exported_trial(study)
    key = TrialAttrs.of(trial).config_key if trial is not None else None
    return study_parity(study, key, stored_specs(study)[1].precision).lines()


def _winner(console: Console, ok: Any, verdict: Verdict) -> None:
    """The best config with its 95% interval, how far ahead of the runner-up, your own config
    and the median it is (between-trial noise included), and where its figures come from."""
    from autotune.study.record.trial_attrs import TrialAttrs

    figures, best, basis = verdict.figures, verdict.winner, verdict.figures.basis
    row = ok[ok["number"] == best.trial.number].iloc[0]
    n = len(basis.values)
    low, high = figures.range
    how = (
        f" (95% range {low:,.0f}-{high:,.0f}, {n} trial{'s' if n > 1 else ''})"
        if figures.measured
        else ""
    )
    mfu = (
        f", MFU {row['mfu'] * basis.tokens_per_s / row['tokens_per_s']:.1%}" if row["mfu"] else ""
    )
    console.print(
        f"[bold]best[/]: trial {best.first}  {display_label(row['label'])}  "
        f"{figures.tokens_per_s:,.0f} tok/s{how}{mfu or ''} ({row['source']})"
    )
    if figures.measured or figures.extrapolated:
        console.print(f"  figures from {verdict.winner_figures_text()}")
    if (r := figures.runner_up) is not None:
        label = display_label(TrialAttrs.of(r.other.trial).label)
        if r.behind:
            console.print(
                f"  within noise of the runner-up, trial {r.other.first} {label}: the "
                f"repeats after the choice read them alike (95% interval {r.low:.2f}x-"
                f"{r.high:.2f}x); either will do"
            )
        else:
            apart = f" (95% interval {r.low:.2f}x-{r.high:.2f}x)" if figures.measured else ""
            console.print(f"  {r.ratio:.2f}x the runner-up{apart}, trial {r.other.first} {label}")
    if (y := figures.yours) is not None:
        apart = f"; 95% interval {y.low:.2f}x-{y.high:.2f}x" if figures.measured else ""
        label = display_label(TrialAttrs.of(y.other.trial).label)
        speed = "within noise of" if y.behind else f"{y.ratio:.2f}x"
        console.print(
            f"  {speed} your own config ({label}, trial {y.other.first}: "
            f"{y.other.tokens_per_s:,.0f} tok/s{apart})"
        )
    if figures.is_yours:
        console.print(
            f"  1.00x your own config ({display_label(row['label'])}, trial "
            f"{best.first}: the winner is your own config)"
        )
    if figures.median is not None and figures.worst is not None:
        others = f"{figures.configs} other {figures.among}"
        console.print(
            f"  {figures.median:.2f}x the median and {figures.worst:.2f}x the worst of {others}"
        )
    if (tie := figures.tie()) is not None:
        console.print(f"  [yellow]{tie}[/]")
    between = figures.between
    if figures.measured and between is not None:
        console.print(
            f"  between-trial spread {between.relative:.1%} (from {between.dof} degrees of "
            "freedom of repeated configs" + (f"; {figures.prior})" if figures.prior else ")")
        )
