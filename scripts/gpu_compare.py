"""Predicted against measured step time and memory for every trial of the GPU check's
studies (scripts/gpu_check.sh), as a markdown table on stdout.

    .venv/bin/python scripts/gpu_compare.py results/gpu/studies
"""

from __future__ import annotations

import sys
from pathlib import Path

import optuna

from autotune.study.record.trial_attrs import TrialAttrs

GIB = 2**30


def ratio(measured: float | None, predicted: float | None) -> str:
    return f"{measured / predicted:.2f}" if measured and predicted else "-"


def rows(db: Path) -> list[str]:
    storage = f"sqlite:///{db}"
    out = []
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        for t in study.trials:
            attrs = TrialAttrs.of(t)
            predicted = attrs.predicted
            predicted_step = predicted.step_time_s if predicted is not None else None
            predicted_memory = predicted.memory_bytes if predicted is not None else None
            step, peak = attrs.step_time_s, attrs.peak_memory_bytes
            label = attrs.config.label() if attrs.config_values is not None else ""
            out.append(
                f"| {summary.study_name} | {t.number} | {label} | "
                f"{attrs.kind or t.state.name.lower()} | {attrs.source or 'measured'} | "
                f"{step * 1e3 if step else float('nan'):.1f} | "
                f"{(predicted_step or float('nan')) * 1e3:.1f} | "
                f"{ratio(step, predicted_step)} | "
                f"{peak / GIB if peak else float('nan'):.2f} | "
                f"{(predicted_memory or float('nan')) / GIB:.2f} | "
                f"{ratio(peak, predicted_memory)} | "
                f"{(attrs.error or '')[:80]} |"
            )
    return out


def main() -> None:
    root = Path(sys.argv[1])
    print("# GPU check: predicted vs measured, per trial\n")
    print("Measured memory is `torch.cuda.max_memory_allocated` on the worst rank.\n")
    print(
        "| study | trial | config | kind | source | step ms | predicted ms | measured/predicted "
        "| peak GiB | predicted GiB | measured/predicted | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for db in sorted(root.glob("*/study.db")):
        print("\n".join(rows(db)))


if __name__ == "__main__":
    main()
