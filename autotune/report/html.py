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
import warnings
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import plotly.graph_objects as go

from autotune.errors import InputError
from autotune.report.cost import cost_line, study_cost
from autotune.report.header import report_header
from autotune.report.table import trial_table
from autotune.study.choices import CHOICES_ATTR
from autotune.study.record.optuna_private import storage_url_of
from autotune.study.record.storage import sqlite_file
from autotune.study.record.trial_attrs import TrialAttrs
from autotune.trial.spec import write_atomically
from autotune.units import column_text, display_label, knob_text

_RATE = "%{y:,.0f} tok/s"
"""Hover text of a throughput: thousands separated, never in scientific notation."""


def write_report(study: optuna.Study, out: Path, force: bool = False) -> Path:
    """The report at `out`: a new file, or one replacing an earlier report of autotune's
    (`GENERATOR` in its head); any other file only with `force`, and never the study's own
    storage. A symbolic link, a FIFO, a device or a folder there is refused in one line."""
    if out.is_symlink() or (out.exists() and not out.is_file()):
        kind = "a symbolic link" if out.is_symlink() else "not a plain file"
        raise InputError(f"report file {out} is {kind}; give a plain file's path")
    db = sqlite_file(storage_url_of(study) or "")
    if db is not None and out.exists() and out.resolve() == db.resolve():
        raise InputError(f"report file {out} is the study's own storage; give another path")
    if out.exists() and not force and not is_report(out):
        raise InputError(
            f"report file {out} exists and is not an autotune report; --force replaces it"
        )
    frame = trial_table(study)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    source = _source(frame)
    figures = [
        f
        for f in (
            _best_so_far(frame, trials, source),
            _all_trials(frame, source),
            _knobs(frame, study, source),
            _importances(frame, study, source),
            _memory(frame, source),
            _predicted(frame, trials, source),
            _time_split(frame, trials, source),
        )
        if f is not None
    ]
    parts = [report_header(study, frame, source)]
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
    page = _PAGE.format(
        generator=GENERATOR, title=html.escape(study.study_name), body="\n".join(parts)
    )
    write_atomically(out, page)
    return out


def _source(frame: pd.DataFrame) -> str:
    sources = set(frame["source"].dropna()) if not frame.empty else set()
    return "/".join(sorted(sources)) or "measured"


def _titled(title: str, source: str) -> str:
    return f"{title} ({source})"


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
        hovertemplate="trial %{x}: " + _RATE,
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
            hovertemplate="%{x}: " + _RATE,
        )
        fig.update_layout(xaxis2={"overlaying": "x", "side": "top", "title": "wall time"})
    fig.update_layout(
        title=_titled("Best tokens/s so far", source),
        xaxis_title="trial",
        yaxis={"title": "tokens/s", "tickformat": ","},
    )
    return fig


def _all_trials(frame: pd.DataFrame, source: str) -> go.Figure:
    fig = go.Figure()
    ok = frame[frame["status"] == "complete"]
    fig.add_bar(
        x=[f"#{n}" for n in ok["number"]],
        y=ok["tokens_per_s"],
        name="ok",
        hovertext=[display_label(label) for label in ok["label"]],
        hovertemplate="%{x} %{hovertext}<br>" + _RATE + "<extra></extra>",
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
        yaxis={"title": "tokens/s", "tickformat": ","},
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
        choices = study.user_attrs[CHOICES_ATTR][knob]
        values = [str(v) for v in choices]
        codes = [values.index(str(v)) if str(v) in values else 0 for v in ok[knob]]
        dims.append(
            {
                "label": knob,
                "values": codes,
                "tickvals": list(range(len(values))),
                "ticktext": [knob_text(knob, v) for v in choices],
            }
        )
    dims.append({"label": "tokens/s", "values": ok["tokens_per_s"], "tickformat": ",.0f"})
    fig = go.Figure(
        go.Parcoords(dimensions=dims, line={"color": ok["tokens_per_s"], "colorscale": "Viridis"})
    )
    fig.update_layout(title=_titled("Knobs against throughput", source))
    fig.update_layout(margin={"t": 110})  # room for the axis labels above the plot
    return fig


def _importances(frame: pd.DataFrame, study: optuna.Study, source: str) -> go.Figure | None:
    """Optuna's importances of the knobs that varied among completed trials (a knob held at
    one value explains nothing; Optuna would still list it)."""
    ok = frame[frame["status"] == "complete"]
    varied = [k for k in study.user_attrs.get(CHOICES_ATTR, {}) if ok[k].astype(str).nunique() > 1]
    if not varied:
        return None
    try:
        with warnings.catch_warnings():  # few trials: "quantiles select the same set of trials"
            warnings.filterwarnings("ignore", "Target and region quantiles", UserWarning)
            importances = optuna.importance.get_param_importances(study, params=varied)
    except (RuntimeError, ValueError):
        return None  # too few completed trials
    if not importances:
        return None
    names = list(importances)[::-1]
    fig = go.Figure(
        go.Bar(
            x=[importances[n] for n in names],
            y=names,
            orientation="h",
            hovertemplate="%{y}: %{x:.2f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=_titled("Importance of the knobs that varied (Optuna)", source),
        xaxis_title="importance",
    )
    return fig


def _memory(frame: pd.DataFrame, source: str) -> go.Figure | None:
    ok = frame[(frame["status"] == "complete") & frame["peak_memory_bytes"].notna()]
    if ok.empty:
        return None
    peak = ok["peak_memory_bytes"].astype(float)
    unit, size = ("MiB", 2**20) if peak.max() < 2**30 else ("GiB", 2**30)  # 0.47-0.56 GiB
    gib = peak / size  # read as "0.5"/"0.6" once; in MiB under a GiB
    front, best = [], -math.inf
    for memory, tps in sorted(zip(gib, ok["tokens_per_s"], strict=True)):
        if tps > best:
            front.append((memory, tps))
            best = tps
    fig = go.Figure()
    fig.add_scatter(
        x=gib,
        y=ok["tokens_per_s"],
        mode="markers",
        name="trials",
        hovertext=[display_label(label) for label in ok["label"]],
        hovertemplate="%{hovertext}<br>%{x:.1f} " + unit + ", " + _RATE + "<extra></extra>",
    )
    fig.add_scatter(
        x=[m for m, _ in front],
        y=[t for _, t in front],
        mode="lines+markers",
        name="Pareto front",
        line_shape="hv",
        hovertemplate="%{x:.1f} " + unit + ", " + _RATE,
    )
    fig.update_layout(
        title=_titled("Throughput against peak memory", source),
        xaxis={"title": f"peak memory per rank ({unit})", "ticksuffix": f" {unit}"},
        yaxis={"title": "tokens/s", "tickformat": ","},
    )
    return fig


def _predicted(frame: pd.DataFrame, trials: dict[int, Any], source: str) -> go.Figure | None:
    rows = []
    for n, measured in zip(frame["number"], frame["step_time_s"], strict=True):
        prediction = TrialAttrs.of(trials[n]).predicted
        if measured and prediction is not None:
            rows.append((n, prediction.step_time_s * 1e3, float(measured) * 1e3))
    if not rows:
        return None
    errors = [f"#{n}: {p / m - 1:+.0%}" for n, p, m in rows]
    fig = go.Figure()
    fig.add_scatter(
        x=[m for _, _, m in rows],
        y=[p for _, p, _ in rows],
        mode="markers",
        hovertext=errors,
        hovertemplate="%{hovertext}: measured %{x:,.1f} ms, predicted %{y:,.1f} ms<extra></extra>",
        name="trials",
    )
    top = max(max(p, m) for _, p, m in rows)
    fig.add_scatter(x=[0, top], y=[0, top], mode="lines", name="exact", line={"dash": "dot"})
    median = sorted(abs(p / m - 1) for _, p, m in rows)[len(rows) // 2]
    fig.update_layout(
        title=_titled(f"Predicted against measured step time (median error {median:.0%})", source),
        xaxis={"title": "measured step time (ms)", "tickformat": ","},
        yaxis={"title": "predicted (ms)", "tickformat": ","},
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
        fig.add_bar(
            x=[r[0] for r in rows],
            y=[float(r[i]) * 1e3 for r in rows],
            name=name,
            hovertemplate="%{x}: %{y:,.1f} ms",
        )
    fig.update_layout(
        barmode="stack",
        yaxis={"title": "ms per step", "tickformat": ","},
        title=_titled(
            "Time per step: compute, exposed communication, bubble (profiled vs model)", source
        ),
    )
    return fig


def _table(frame: pd.DataFrame) -> str:
    """Every trial, a cell per column in the units the rest of the page uses; a cell whose
    text is not its value sorts by its value (`data-sort`)."""
    shown = frame.drop(columns=["label"]).rename(columns={"number": "trial"})
    head = "".join(f"<th>{html.escape(_HEADERS.get(c, c))}</th>" for c in shown.columns)
    rows = []
    for record in shown.to_dict("records"):
        cells = []
        for column, value in record.items():
            text = column_text(str(column), value)
            raw = _sort_key(value)
            sort = f" data-sort='{html.escape(raw)}'" if text not in ("-", raw) else ""
            cells.append(f"<td{sort}>{html.escape(text)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (
        "<h2>All trials</h2><p>Click a column to sort.</p>"
        f"<table class='sortable'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _sort_key(value: Any) -> str:
    """A cell's value for sorting, in plain digits (no exponent)."""
    if isinstance(value, float):
        return f"{value:.12f}".rstrip("0").rstrip(".")
    return str(value)


_HEADERS = {
    "tokens_per_s": "tokens/s",
    "mfu": "MFU",
    "step_time_s": "step",
    "interval": "±",
    "measured_steps": "steps",
    "stopped_for": "stopped",
    "peak_memory_bytes": "peak memory",
    "model_state_bytes": "model states",
}


GENERATOR = '<meta name="generator" content="autotune report">'
"""In every report's head: a file that holds it is autotune's to replace."""


def is_report(path: Path) -> bool:
    """Whether `path` is a report autotune wrote: its head names the generator, or (a report
    from before it did) its title is a report's."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return GENERATOR.encode() in head or b"<title>autotune report: " in head


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">{generator}<title>autotune report: {title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; }}
.source {{ font-size: 1.2em; }} .made {{ color: #777; }}
table.sortable {{ border-collapse: collapse; font-size: 0.85em; }}
table.sortable th {{ cursor: pointer; background: #eee; }}
table.sortable td, table.sortable th {{ padding: 3px 8px; border-bottom: 1px solid #ddd; }}
table.sortable td {{ white-space: nowrap; }}
</style></head><body>
{body}
<script>
document.querySelectorAll("table.sortable th").forEach((th, col) => {{
  th.addEventListener("click", () => {{
    const body = th.closest("table").tBodies[0];
    const rows = Array.from(body.rows);
    const key = r => {{ const c = r.cells[col];
                        const t = (c.dataset.sort ?? c.innerText).replace(/,/g, "");
                        const n = parseFloat(t); return isNaN(n) ? t : n; }};
    const dir = th.dataset.dir === "asc" ? -1 : 1; th.dataset.dir = dir === 1 ? "asc" : "desc";
    rows.sort((a, b) => (key(a) > key(b) ? dir : key(a) < key(b) ? -dir : 0));
    rows.forEach(r => body.appendChild(r));
  }});
}});
</script></body></html>
"""
