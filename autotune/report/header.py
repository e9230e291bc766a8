"""The report's opening: what was tuned, the winner with the figures every output states
(`study.verdict.figures`), leaders within noise in words, a slice study's confirmation and cost."""

from __future__ import annotations

import html
from datetime import datetime

import optuna
import pandas as pd

from autotune.study.record.trial_attrs import TrialAttrs
from autotune.study.search.economics import study_lines
from autotune.study.slice.confirm import slice_lines
from autotune.study.verdict.winner import decide
from autotune.units import display_label


def report_header(study: optuna.Study, frame: pd.DataFrame, source: str) -> str:
    attrs = study.user_attrs
    workload = attrs.get("workload", {}).get("name", "?")
    cluster = attrs.get("cluster", {}).get("name", "?")
    ok = frame[frame["status"] == "complete"]
    verdict = decide(study)
    lines = [
        f"<h1>autotune study {html.escape(study.study_name)}</h1>",
        f"<p class='source'>Figures are <b>{html.escape(source)}</b>.</p>",
        f"<p>Tuned {html.escape(str(attrs.get('engine', '?')))} on "
        f"{html.escape(workload)} / {html.escape(cluster)}: {len(frame)} trials ran, "
        f"{len(ok)} completed.</p>",
    ]
    if verdict is not None and not ok.empty:
        figures = verdict.figures
        label = html.escape(display_label(TrialAttrs.of(figures.best.trial).label))
        low, high = figures.range
        interval = f" (95% range {low:,.0f}-{high:,.0f})" if figures.measured else ""
        ratios = "".join(
            f", {'within noise of' if r.behind else f'{r.ratio:.2f}x'} {n} "
            f"({r.low:.2f}x-{r.high:.2f}x)"
            for n, r in figures.ratios()
        )
        median = (
            f", {figures.median:.2f}x the median other config"
            if figures.median is not None
            else ""
        )
        lines.append(
            f"<p>Winner: trial {figures.best.first}, <code>{label}</code>, "
            f"{figures.tokens_per_s:,.0f} tokens/s{interval} (figures from "
            f"{html.escape(verdict.winner_figures_text())}){median}{ratios}.</p>"
        )
        if (tie := figures.tie()) is not None:
            lines.append(f"<p>{html.escape(tie)}.</p>")
        economics = "; ".join(study_lines(study, figures))
        lines.append(f"<p class='economics'>{html.escape(economics.capitalize())}.</p>")
    lines += [f"<p>{html.escape(line)}</p>" for line in slice_lines(study)]
    lines += [f"<p class='parity'>{html.escape(line)}</p>" for line in _parity_lines(study)]
    lines.append(LEGEND)
    lines.append(f"<p class='made'>{html.escape(made_by())}</p>")
    return "\n".join(lines)


def _parity_lines(study: optuna.Study) -> list[str]:
    """The study's loss-parity verdict for its winner, as the summary states it; none for a
    study of autotune's own worker."""
    from autotune.study.record.trial_attrs import NO_REFERENCE, USERS_CONFIG
    from autotune.study.verdict.parity_verdict import study_parity

    if not {USERS_CONFIG, NO_REFERENCE} & set(study.user_attrs):
        return []
    verdict = decide(study)
    key = TrialAttrs.of(verdict.trial).config_key if verdict is not None else None
    precision = str((study.user_attrs.get("workload") or {}).get("precision", "bf16"))
    return [line.strip() for line in study_parity(study, key, precision).lines()]


LEGEND = (
    "<p class='legend'>Throughput is tokens per second over the whole cluster. A 95% range "
    "is where the config's mean throughput lies at that confidence, from its launches and "
    'the between-trial spread; "stopped" says why a trial measured no more steps (precise: '
    "its interval was narrow enough; slower: surely slower than the best; cap: it reached "
    "--measured-steps; differs: its loss left yours).</p>"
)


def made_by() -> str:
    """When, with what command and versions, on which host the report was made."""
    import importlib.metadata
    import platform
    import shlex
    import socket
    import sys

    versions = []
    for package in ("autotune", "torch", "deepspeed", "optuna"):
        try:
            versions.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    when = datetime.now().astimezone().isoformat(timespec="seconds")
    command = shlex.join(["autotune", *sys.argv[1:]])
    return (
        f"Made {when} on {socket.gethostname()} by `{command}` (Python "
        f"{platform.python_version()}, {', '.join(versions)})."
    )
