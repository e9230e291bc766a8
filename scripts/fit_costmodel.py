"""Refit the step-time model's GPU defaults to the published runs and print them as
`DEFAULT_CALIBRATION` states them in autotune/estimate/calibration.py.

Each generation's four parameters (compute efficiency, the GEMM width at which it halves, the
bandwidth scale, overlap) are fitted from `Calibration()`'s generic values to every usable row
of autotune/calibration/data/published_runs_public.csv (a copy of ../shared/data's); Hopper's
FP8 efficiency then to the published bf16/FP8 pairs of runs (calibration/fp8_pairs.py);
Megatron's own compute efficiency (its `EngineTraits.calibration_overrides`) to its dense runs in
published_moe_cp_runs.csv (calibration/published_moe_cp.py), and the share its
expert-parallel overlap saves of the shorter of exchanges and compute (`Calibration.ep_overlap`)
to those runs that differ only in it. With --check it exits 1 when
the code's constants differ from the fit (tests/calibration/test_costmodel_fit.py and, for
Megatron's, test_published_moe_cp.py run the same check). scripts/validate_costmodel.py
reports the fit's error per source, and held out by source.

    .venv/bin/python scripts/fit_costmodel.py [--check] [--data FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.calibration.published import DATA, fitted_defaults
from autotune.calibration.published_moe_cp import fitted_engine_defaults, fitted_ep_overlap
from autotune.engines import get_engine
from autotune.estimate.calibration import DEFAULT_CALIBRATION, Calibration, default_calibration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--check", action="store_true", help="exit 1 if the code differs")
    args = parser.parse_args()
    fitted = fitted_defaults(args.data)
    for generation, cal in fitted.items():
        print(
            f'    "{generation}": Calibration(\n'
            f"        compute_efficiency={cal.compute_efficiency}, "
            f"gemm_half_size={cal.gemm_half_size}, bandwidth_scale={cal.bandwidth_scale}, "
            f"overlap={cal.overlap}"
            + (
                f", fp8_efficiency={cal.fp8_efficiency}"
                if cal.fp8_efficiency != Calibration().fp8_efficiency
                else ""
            )
            + "\n    ),"
        )
    engines = fitted_engine_defaults()
    for (engine, generation), cal in engines.items():
        print(
            f'    ("{engine}", "{generation}"): compute_efficiency={cal.compute_efficiency}, '
            f"fp8_efficiency={cal.fp8_efficiency}, moe_expert_host_s={cal.moe_expert_host_s} "
            f"(from {generation}'s default; the host time from the MoE runs)"
        )
    ep_overlap = fitted_ep_overlap()
    print(
        f"    Calibration.ep_overlap={ep_overlap} (Megatron's expert-parallel overlap, from "
        "the published pair of runs with and without it)"
    )
    differ = [g for g, cal in fitted.items() if DEFAULT_CALIBRATION.get(g) != cal]
    differ += ["ep_overlap"] if Calibration().ep_overlap != ep_overlap else []
    differ += [
        f"{e} on {g}"
        for (e, g), cal in engines.items()
        if default_calibration(g, get_engine(e).traits) != cal
    ]
    if differ:
        print(f"the code's defaults differ from the fit for: {', '.join(differ)}", file=sys.stderr)
        if args.check:
            sys.exit(1)


if __name__ == "__main__":
    main()
