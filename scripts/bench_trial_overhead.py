"""Where a trial's wall time goes, for the tiny workload on this machine.

Runs real trials (both engines, a few configs, several repeats) and splits each trial's wall
time into: launch and imports (torchrun, Python start, torch/engine imports), initialisation
(process group, model, engine), warm-up, measured steps, the profiled step, and teardown
(result gathering, process exit). Writes results/bench/trial_overhead.md.

    .venv/bin/python scripts/bench_trial_overhead.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = [
    ("deepspeed", "zero=1,mbs=4"),
    ("deepspeed", "zero=3,mbs=4"),
    ("torch", "zero=0,mbs=4"),
    ("torch", "zero=3,mbs=4"),
]
PHASES = [
    "launch + imports",
    "initialisation",
    "warm-up",
    "measured steps",
    "profiled step",
    "teardown",
]


def split(folder: Path) -> dict[str, float]:
    result = json.loads((folder / "result.json").read_text())
    wall = json.loads((folder / "outcome.json").read_text())["wall_s"]
    p = result["phases_s"]
    inside = sum(p.values())
    return {
        "launch + imports": p["started"] + p["imported"],
        "initialisation": p["initialized"],
        "warm-up": p["warmed_up"],
        "measured steps": p["measured"],
        "profiled step": p["profiled"],
        "teardown": p["finished"] + max(wall - inside, 0.0),
        "total": wall,
        "warmup_steps": result["warmup_steps"],
        "measured_steps": result["measured_steps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/trial_overhead.md")
    args = parser.parse_args()
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for engine, config in CONFIGS:
                folder = Path(tmp) / f"{engine}-{config}-{repeat}"
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "autotune",
                        "trial",
                        "--engine",
                        engine,
                        "--cluster",
                        "local:2",
                        "--config",
                        config,
                        "--out",
                        str(folder),
                        "--json",
                    ],
                    capture_output=True,
                    text=True,
                    cwd=REPO,
                )
                if done.returncode != 0:
                    sys.exit(f"trial {engine} {config} failed:\n{done.stdout}{done.stderr}")
                rows.setdefault((engine, config), []).append(split(folder))
                print(
                    f"{engine:9} {config:14} {rows[(engine, config)][-1]['total']:.1f} s",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(rows, args.repeats))
    print(f"wrote {args.out}")


def report(rows: dict[tuple[str, str], list[dict[str, float]]], repeats: int) -> str:
    lines = [
        "# Trial overhead (tiny workload, 2 gloo processes)",
        "",
        f"Generated {datetime.now().isoformat(timespec='seconds')} by "
        f"`.venv/bin/python scripts/bench_trial_overhead.py --repeats {repeats}`; "
        "medians over the repeats, seconds. Default step plan: warm-up until the last 2 steps "
        "lie within 10% of their median (2 to 12 steps, at most 15 s), measured steps until "
        "the step time's 95% interval is within 2% (3 to 8 steps), 1 profiled step.",
        "",
        "| engine | config | " + " | ".join(PHASES) + " | total | measured share |",
        "|---|---|" + "---|" * (len(PHASES) + 2),
    ]
    shares = []
    for (engine, config), runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in [*PHASES, "total"]}
        share = med["measured steps"] / med["total"]
        shares.append(share)
        lines.append(
            f"| {engine} | {config} | "
            + " | ".join(f"{med[k]:.2f}" for k in PHASES)
            + f" | {med['total']:.2f} | {share:.1%} |"
        )
    lines += [
        "",
        f"Share of trial time spent in measured steps: {min(shares):.1%} to "
        f"{max(shares):.1%}. The rest is fixed cost (launch, imports, initialisation, "
        "teardown), which dominates a tiny model; on a real model the measured steps "
        "take seconds each and the share rises accordingly.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
