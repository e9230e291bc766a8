"""`autotune report`: one self-contained HTML file (plotly inline, no network to open it).

What was tuned, the winner and its speed-up over the median, then the figures: best so far
by trial and by wall time, every trial's tokens/s (failures by kind), knobs against
throughput, parameter importances, throughput against peak memory with the Pareto front,
predicted against measured step time, the time split per trial, and a sortable table.
Every figure says whether its figures were measured, replayed or simulated.
"""

from __future__ import annotations

import html
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import plotly.graph_objects as go

from autotune.report.cost import cost_line, study_cost
from autotune.report.table import best_standing, trial_table
from autotune.study.choices import CHOICES_ATTR
from autotune.study.trial_attrs import TrialAttrs
from autotune.trial.spec import write_atomically


def write_report(study: optuna.Study, out: Path) -> Path:
    frame = trial_table(study)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    source = _source(frame)
    figures = [
        f
        for f in (
            _best_so_far(frame, trials, source),
            _all_trials(frame, source),
            _knobs(frame, study, source),
            _importances(study, source),
            _memory(frame, source),
            _predicted(frame, trials, source),
            _time_split(frame, trials, source),
        )
        if f is not None
    ]
    parts = [_header(study, frame, source)]
    for i, fig in enumerate(figures):
        fig.update_layout(template="plotly_white", height=420)
        if not fig.layout.margin.t:
            fig.update_layout(margin={"t": 60})
        parts.append(
            fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
        )
    cost = study_cost(study)
    if cost is not None:
        parts.append(f"<h2>Where the time went</h2><p>{html.escape(cost_line(cost))}</p>")
    parts.append(_table(frame))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, _PAGE.format(title=html.escape(study.study_name), body="\n".join(parts)))
    return out


def _source(frame: pd.DataFrame) -> str:
    sources = set(frame["source"].dropna()) if not frame.empty else set()
    return "/".join(sorted(sources)) or "measured"


def _titled(title: str, source: str) -> str:
    return f"{title} ({source})"


def _header(study: optuna.Study, frame: pd.DataFrame, source: str) -> str:
    attrs = study.user_attrs
    workload = attrs.get("workload", {}).get("name", "?")
    cluster = attrs.get("cluster", {}).get("name", "?")
    ok = frame[frame["status"] == "complete"]
    winner = best_standing(study)
    lines = [
        f"<h1>autotune study {html.escape(study.study_name)}</h1>",
        f"<p class='source'>Figures are <b>{html.escape(source)}</b>.</p>",
        f"<p>Tuned {html.escape(str(attrs.get('engine', '?')))} on "
        f"{html.escape(workload)} / {html.escape(cluster)}: {len(frame)} trials ran, "
        f"{len(ok)} completed.</p>",
    ]
    if winner is not None and not ok.empty:
        median = ok["tokens_per_s"].astype(float).median()
        tokens = winner.tokens_per_s
        lines.append(
            f"<p>Winner: trial {winner.first}, "
            f"<code>{html.escape(TrialAttrs.of(winner.trial).label or '')}</code>, "
            f"{tokens:,.0f} tokens/s (the mean of {len(winner.values)} trial(s)), "
            f"{tokens / median:.2f}x the median trial.</p>"
        )
    lines.append(f"<p class='made'>Made {datetime.now().isoformat(timespec='seconds')}.</p>")
    return "\n".join(lines)


def _best_so_far(frame: pd.DataFrame, trials: dict[int, Any], source: str) -> go.Figure | None:
    ok = frame[frame["status"] == "complete"].sort_values("number")
    if ok.empty:
        return None
    fig = go.Figure()
    fig.add_scatter(
        x=ok["number"],
        y=ok["tokens_per_s"].cummax(),
        mode="lines+markers",
        name="by trial number",
        line_shape="hv",
    )
    done_at = [trials[n].datetime_complete for n in ok["number"]]
    if all(done_at):
        fig.add_scatter(
            x=done_at,
            y=ok["tokens_per_s"].cummax(),
            mode="lines+markers",
            name="by wall time",
            xaxis="x2",
            line_shape="hv",
        )
        fig.update_layout(xaxis2={"overlaying": "x", "side": "top", "title": "wall time"})
    fig.update_layout(
        title=_titled("Best tokens/s so far", source), xaxis_title="trial", yaxis_title="tokens/s"
    )
    return fig


def _all_trials(frame: pd.DataFrame, source: str) -> go.Figure:
    fig = go.Figure()
    ok = frame[frame["status"] == "complete"]
    fig.add_bar(
        x=[f"#{n}" for n in ok["number"]], y=ok["tokens_per_s"], name="ok", hovertext=ok["label"]
    )
    for kind, part in frame[frame["status"] != "complete"].groupby("kind"):
        fig.add_bar(
            x=[f"#{n}" for n in part["number"]],
            y=[0] * len(part),
            name=str(kind),
            hovertext=part["error"],
        )
    fig.update_layout(
        title=_titled("Every trial's tokens/s, best first; failures by kind", source),
        yaxis_title="tokens/s",
        barmode="overlay",
    )
    return fig


def _knobs(frame: pd.DataFrame, study: optuna.Study, source: str) -> go.Figure | None:
    knobs = list(study.user_attrs.get(CHOICES_ATTR, {}))
    ok = frame[frame["status"] == "complete"]
    if not knobs or ok.empty:
        return None
    dims = []
    for knob in knobs:
        values = [str(v) for v in study.user_attrs[CHOICES_ATTR][knob]]
        codes = [values.index(str(v)) if str(v) in values else 0 for v in ok[knob]]
        dims.append(
            {
                "label": knob,
                "values": codes,
                "tickvals": list(range(len(values))),
                "ticktext": values,
            }
        )
    dims.append({"label": "tokens/s", "values": ok["tokens_per_s"]})
    fig = go.Figure(
        go.Parcoords(dimensions=dims, line={"color": ok["tokens_per_s"], "colorscale": "Viridis"})
    )
    fig.update_layout(title=_titled("Knobs against throughput", source))
    fig.update_layout(margin={"t": 110})  # room for the axis labels above the plot
    return fig


def _importances(study: optuna.Study, source: str) -> go.Figure | None:
    try:
        importances = optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError):
        return None  # too few completed trials, or a single value per knob
    if not importances:
        return None
    names = list(importances)[::-1]
    fig = go.Figure(go.Bar(x=[importances[n] for n in names], y=names, orientation="h"))
    fig.update_layout(
        title=_titled("Parameter importances (Optuna's fANOVA)", source), xaxis_title="importance"
    )
    return fig


def _memory(frame: pd.DataFrame, source: str) -> go.Figure | None:
    ok = frame[(frame["status"] == "complete") & frame["peak_memory_bytes"].notna()]
    if ok.empty:
        return None
    gib = ok["peak_memory_bytes"].astype(float) / 2**30
    front, best = [], -math.inf
    for memory, tps in sorted(zip(gib, ok["tokens_per_s"], strict=True)):
        if tps > best:
            front.append((memory, tps))
            best = tps
    fig = go.Figure()
    fig.add_scatter(
        x=gib, y=ok["tokens_per_s"], mode="markers", name="trials", hovertext=ok["label"]
    )
    fig.add_scatter(
        x=[m for m, _ in front],
        y=[t for _, t in front],
        mode="lines+markers",
        name="Pareto front",
        line_shape="hv",
    )
    fig.update_layout(
        title=_titled("Throughput against peak memory", source),
        xaxis_title="peak memory per rank (GiB)",
        yaxis_title="tokens/s",
    )
    return fig


def _predicted(frame: pd.DataFrame, trials: dict[int, Any], source: str) -> go.Figure | None:
    rows = []
    for n, measured in zip(frame["number"], frame["step_time_s"], strict=True):
        prediction = TrialAttrs.of(trials[n]).predicted
        if measured and prediction is not None:
            rows.append((n, prediction.step_time_s, measured))
    if not rows:
        return None
    errors = [f"#{n}: {p / m - 1:+.0%}" for n, p, m in rows]
    fig = go.Figure()
    fig.add_scatter(
        x=[m for _, _, m in rows],
        y=[p for _, p, _ in rows],
        mode="markers",
        hovertext=errors,
        name="trials",
    )
    top = max(max(p, m) for _, p, m in rows)
    fig.add_scatter(x=[0, top], y=[0, top], mode="lines", name="exact", line={"dash": "dot"})
    median = sorted(abs(p / m - 1) for _, p, m in rows)[len(rows) // 2]
    fig.update_layout(
        title=_titled(f"Predicted against measured step time (median error {median:.0%})", source),
        xaxis_title="measured step time (s)",
        yaxis_title="predicted (s)",
    )
    return fig


def _time_split(frame: pd.DataFrame, trials: dict[int, Any], source: str) -> go.Figure | None:
    rows = []
    for n in frame["number"]:
        attrs = TrialAttrs.of(trials[n])
        profile = attrs.profile
        predicted = attrs.predicted.step if attrs.predicted is not None else None
        if profile:
            rows.append((f"#{n} measured", profile["compute_s"], profile["comm_s"], 0.0))
        if predicted:
            comm = (
                predicted["tp_comm_s"]
                + predicted["pp_p2p_s"]
                # studies from before context and expert parallelism lack these
                + predicted.get("cp_comm_s", 0.0)
                + predicted.get("ep_comm_s", 0.0)
                + predicted["dp_exposed_s"]
            )
            rows.append(
                (f"#{n} predicted", predicted["compute_s"], comm, predicted["pp_bubble_s"])
            )
    if not rows:
        return None
    fig = go.Figure()
    for i, name in enumerate(("compute", "exposed communication", "pipeline bubble"), 1):
        fig.add_bar(x=[r[0] for r in rows], y=[r[i] for r in rows], name=name)
    fig.update_layout(
        barmode="stack",
        yaxis_title="seconds per step",
        title=_titled(
            "Time per step: compute, exposed communication, bubble (profiled vs model)", source
        ),
    )
    return fig


def _table(frame: pd.DataFrame) -> str:
    shown = frame.drop(columns=["label"]).rename(columns={"number": "trial"})
    return "<h2>All trials</h2><p>Click a column to sort.</p>" + shown.to_html(
        index=False, na_rep="-", classes="sortable", border=0, float_format=lambda v: f"{v:,.4g}"
    )


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>autotune report: {title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; }}
.source {{ font-size: 1.2em; }} .made {{ color: #777; }}
table.sortable {{ border-collapse: collapse; font-size: 0.85em; }}
table.sortable th {{ cursor: pointer; background: #eee; }}
table.sortable td, table.sortable th {{ padding: 3px 8px; border-bottom: 1px solid #ddd; }}
</style></head><body>
{body}
<script>
document.querySelectorAll("table.sortable th").forEach((th, col) => {{
  th.addEventListener("click", () => {{
    const body = th.closest("table").tBodies[0];
    const rows = Array.from(body.rows);
    const key = r => {{ const t = r.cells[col].innerText.replace(/,/g, "");
                        const n = parseFloat(t); return isNaN(n) ? t : n; }};
    const dir = th.dataset.dir === "asc" ? -1 : 1; th.dataset.dir = dir === 1 ? "asc" : "desc";
    rows.sort((a, b) => (key(a) > key(b) ? dir : key(a) < key(b) ? -dir : 0));
    rows.forEach(r => body.appendChild(r));
  }});
}});
</script></body></html>
"""
