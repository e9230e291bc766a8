"""`autotune estimate`, `plan` and a simulated study, through the real command."""

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import autotune
from tests.paths import GOLDEN

BIG = ("--engine", "torch", "--model", "llama3-70b", "--cluster", "dgx-h100:32")


def test_estimate_json_has_both_breakdowns(tmp_path: Path) -> None:
    done = autotune(
        "estimate", *BIG, "--config", "tp=8,mbs=1,zero=2,sp=true", "--json", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    e = json.loads(done.stdout)
    for key in ("step_time_s", "tokens_per_s", "tflops_per_device", "mfu", "fits"):
        assert key in e
    assert e["source"] == "predicted"
    memory = e["memory"]
    terms = (
        "weights_bytes",
        "gradients_bytes",
        "optimizer_bytes",
        "activations_bytes",
        "comm_buffers_bytes",
        "overhead_bytes",
    )
    assert memory["total_bytes"] == pytest.approx(sum(memory[t] for t in terms))
    assert e["step"]["total_s"] == pytest.approx(e["step_time_s"])
    assert e["tokens_per_s"] == pytest.approx(128 * 8192 / e["step_time_s"])


def test_plan_ranks_configs_that_fit_best_first(tmp_path: Path) -> None:
    done = autotune("plan", *BIG, "--top", "0", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout)
    assert len(records) > 10 and all(r["fits"] for r in records)
    speeds = [r["tokens_per_s"] for r in records]
    assert speeds == sorted(speeds, reverse=True)
    assert all(set(r["config"]) >= {"tp", "pp", "dp", "zero", "mbs"} for r in records)
    table = autotune("plan", *BIG, "--top", "3", cwd=tmp_path)
    assert "predicted not to fit" in table.stdout and "removed by rule" in table.stdout


def test_a_config_that_cannot_fit_is_reported_not_to_fit(tmp_path: Path) -> None:
    done = autotune(
        "estimate",
        "--engine",
        "torch",
        "--model",
        "llama3-70b",
        "--cluster",
        "dgx-h100:1",
        "--config",
        "tp=1,zero=0,mbs=1",
        "--json",
        cwd=tmp_path,
    )
    e = json.loads(done.stdout)
    assert not e["fits"] and e["memory"]["total_bytes"] > 80 * 2**30


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["estimate", *BIG, "--config", "tp=3"], "rule world_size"),
        (["estimate", *BIG, "--config", "tp=8,pp=8,dp=2"], "dp=2 but the world size 256"),
        (["plan", "--model", "llama3-70b", "--cluster", "dgx-h900:4"], "unknown cluster"),
    ],
)
def test_bad_plan_input(tmp_path: Path, args: list[str], message: str) -> None:
    done = autotune(*args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("tpu9", "unknown device 'tpu9'"),
        ("{name: x, memory_gib: 0, peak_tflops: {bf16: 100}}", "memory_gib"),
    ],
)
def test_bad_cluster_devices(tmp_path: Path, device: str, message: str) -> None:
    (tmp_path / "c.yaml").write_text(
        f"devices_per_node: 8\ndevice: {device}\n"
        "intra_link: {bandwidth_gbps: 300, latency_us: 1}\n"
    )
    done = autotune("plan", "--model", "llama3-8b", "--cluster", "c.yaml", cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_simulated_study_is_labelled_simulated_everywhere(tmp_path: Path) -> None:
    done = autotune(
        "run",
        "--launcher",
        "simulate",
        *BIG,
        "--trials",
        "6",
        "--seed",
        "1",
        "--results",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "(simulated)" in done.stdout
    assert "warning" not in (done.stdout + done.stderr).lower()
    study = "llama3-70b-dgx-h100_32-torch-simulated"
    rows = json.loads(
        autotune(
            "trials",
            "--study",
            study,
            "--results",
            str(tmp_path),
            "--format",
            "json",
            cwd=tmp_path,
        ).stdout
    )
    assert len(rows) == 6 and {r["source"] for r in rows} == {"simulated"}
    best = tmp_path / study / "best"
    assert "SIMULATED" in (best / "train.sh").read_text().splitlines()[1]
    assert (best / "nccl.env").read_text().startswith("# SIMULATED")
    assert yaml.safe_load((best / "best.yaml").read_text())["source"] == "simulated"
    # The plan seeds the study: its best predicted configs ran first.
    plan = json.loads(autotune("plan", *BIG, "--top", "1", "--json", cwd=tmp_path).stdout)
    first = min(rows, key=lambda r: r["number"])
    assert first["tokens_per_s"] == pytest.approx(plan[0]["tokens_per_s"])


def test_report_is_self_contained_and_labelled(tmp_path: Path) -> None:
    done = autotune(
        "run",
        "--launcher",
        "simulate",
        *BIG,
        "--trials",
        "5",
        "--seed",
        "2",
        "--results",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    study = "llama3-70b-dgx-h100_32-torch-simulated"
    page = (tmp_path / study / "report.html").read_text()
    assert not re.search(r"<script[^>]+src=", page)  # plotly.js is inline: no network needed
    assert "Plotly.newPlot" in page
    assert "Figures are <b>simulated</b>" in page
    figures = page.count("Plotly.newPlot")
    assert figures >= 5 and page.count("(simulated)") >= figures
    rows = json.loads(
        autotune(
            "trials",
            "--study",
            study,
            "--results",
            str(tmp_path),
            "--format",
            "json",
            cwd=tmp_path,
        ).stdout
    )
    for row in rows:
        assert f"<td>{row['number']}</td>" in page
    again = autotune(
        "report",
        "--study",
        study,
        "--results",
        str(tmp_path),
        "--out",
        str(tmp_path / "r.html"),
        cwd=tmp_path,
    )
    assert again.returncode == 0 and (tmp_path / "r.html").is_file()
    unknown = autotune("report", "--study", "nope", "--results", str(tmp_path), cwd=tmp_path)
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1


def test_a_model_too_big_for_the_cluster_plans_nothing_and_a_study_says_why(
    tmp_path: Path,
) -> None:
    """llama3-70b on one 8-GPU node: every valid config is predicted not to fit. The plan
    ranks none and counts them; a study refuses in one line, exit 2."""
    small = ("--engine", "megatron", "--model", "llama3-70b", "--cluster", "dgx-h100:1")
    planned = autotune("plan", *small, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert re.search(r"([\d,]+) valid, \1 predicted not to fit, 0 ranked", planned.stdout)
    ran = autotune("run", *small, "--launcher", "simulate", cwd=tmp_path)
    assert ran.returncode == 2
    assert "none of the" in ran.stderr and "is predicted to fit" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_plans_table_folds_nccl_variants_and_matches_its_golden() -> None:
    """Its top 10 once held one layout four times, differing only in NCCL settings with the
    same prediction; counts were "12386304 configs", steps "7,516.1 ms", configs broken
    inside a knob."""
    planned = autotune(
        "plan", "--engine", "megatron", "--model", "llama3-70b", "--cluster", "dgx-h100:16",
        "--top", "5", env={"COLUMNS": "150"},
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    text = planned.stdout
    assert "NCCL variants, same prediction" in text and "12,386,304 configs" in text
    assert " ms " not in text and "7.52 s" in text and "tokens/s (cluster)" in text
    golden = GOLDEN / "plan_llama3-70b_dgx-h100_16.txt"
    if os.environ.get("AUTOTUNE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()
