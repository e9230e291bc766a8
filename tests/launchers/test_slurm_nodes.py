"""The slurm launcher on a real two-node SLURM: two network namespaces of this host, each with
its own address, hostname and slurmd (scripts/slurm.sh --nodes 2 starts it, as root)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from autotune.launchers.slurm_accounting import FINAL_STATES
from tests.conftest import TWO_NODES, autotune, spawn_autotune
from tests.paths import REPO

pytestmark = pytest.mark.slow
NODES = ("at2n1", "at2n2")
BOTH = "at2n[1-2]"
FIRST_NODE_ADDRESS = "10.77.2.11"
SLURM_SH = REPO / "scripts" / "slurm.sh"
STUDY = (
    "--launcher", "slurm", "--cluster", "local:2x1", "--sampler", "grid", "--no-confirm",
    "--no-early-stop", "--measured-steps", "3", "--study", "s",
)  # fmt: skip


def slurm_env() -> dict[str, str]:
    return {**os.environ, **TWO_NODES}


def accounting(job: str, seconds: float = 60) -> tuple[str, str]:
    """sacct's final state of a job and the nodes it ran on, waiting for it: the database lags
    a job's end, and SLURM takes some 40 s here to call a silent node failed."""
    deadline = time.monotonic() + seconds
    while True:
        done = subprocess.run(
            ["sacct", "-j", job, "-X", "-n", "-P", "-o", "State,NodeList"],
            capture_output=True, text=True, env=slurm_env(),
        )  # fmt: skip
        state, _, nodes = done.stdout.strip().partition("|")
        state = state.split(" ")[0]
        if state in FINAL_STATES or time.monotonic() > deadline:
            return state, nodes
        time.sleep(1)


def trial_jobs(results: Path) -> list[str]:
    return [
        (f / "slurm_id").read_text().strip()
        for f in sorted((results / "s" / "trials").iterdir())
        if (f / "slurm_id").exists()
    ]


def kinds(results: Path) -> list[str]:
    done = autotune("trials", "--study", "s", "--results", str(results), "--format", "json")
    assert done.returncode == 0, done.stderr
    return [r["kind"] for r in sorted(json.loads(done.stdout), key=lambda r: r["number"])]


def processes(node: str) -> dict[int, str]:
    """The command line of every process in a node's network namespace, by pid."""
    pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True)
    lines = {}
    for pid in pids.stdout.split():
        with contextlib.suppress(OSError):
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            lines[int(pid)] = line
    return lines


def trial_processes() -> list[str]:
    """What a trial runs, on any node: between jobs a node holds its slurmd alone."""
    return [c for n in NODES for c in processes(n).values() if c and not c.startswith("slurmd ")]


def ranks(node: str) -> list[int]:
    """The trial ranks running in a node's namespace (not the torchrun that started them, nor
    the node check's workers that run before a study's first trial)."""
    return [
        pid
        for pid, line in processes(node).items()
        if "autotune.rank" in line and "torchrun" not in line and "autotune.nodes" not in line
    ]


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {seconds:.0f} s"
        time.sleep(0.5)


def master_addr(pid: int) -> str:
    """Where a rank's process group meets: MASTER_ADDR in its environment."""
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(b"MASTER_ADDR="):
            return item.split(b"=", 1)[1].decode()
    return ""


def kill_node(node: str) -> None:
    """The node lost whole: its link cut first (its peers never hear its sockets close), then
    every process in its namespace killed, its slurmd among them."""
    subprocess.run(["ip", "link", "set", f"{node}h", "down"], check=True)
    for pid in processes(node):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_the_node_check_reads_both_nodes_and_finds_them_alike(
    slurm_nodes: dict[str, str], tmp_path: Path
) -> None:
    """`autotune nodes`: a row per node with its readings, and the verdict in one line."""
    done = autotune("nodes", "--results", str(tmp_path), env=slurm_nodes, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    cells = [re.findall(r"[\w.-]+", line) for line in done.stdout.splitlines()]
    rows = {row[0]: row[1:] for row in cells if row and row[0] in NODES}
    assert sorted(rows) == list(NODES), done.stdout
    assert all(row[-1] == "ok" for row in rows.values()), done.stdout
    assert "node check: 2 nodes, none outside its peers" in done.stdout, done.stdout


def test_study_spans_both_nodes_and_its_sbatch_export_trains_on_both(
    slurm_nodes: dict[str, str], tmp_path: Path
) -> None:
    """One trial (the node-loss test runs another across both nodes), then the export as a job
    of its own."""
    done = autotune("run", *STUDY, "--trials", "1", "--results", str(tmp_path), env=slurm_nodes)
    assert done.returncode == 0, done.stdout + done.stderr
    assert kinds(tmp_path) == ["ok"]
    (job,) = trial_jobs(tmp_path)
    assert accounting(job) == ("COMPLETED", BOTH)

    best = tmp_path / "s" / "best"
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    done = subprocess.run(
        ["sbatch", "--parsable", "--wait", "--time=10", "train.sbatch"],
        cwd=best, capture_output=True, text=True, timeout=900,
        env={**slurm_env(), "TORCHRUN": torchrun},
    )  # fmt: skip
    logs = "".join(p.read_text() for p in best.glob("train-*.log"))
    assert done.returncode == 0, done.stderr + logs
    assert accounting(done.stdout.strip().split(";")[0]) == ("COMPLETED", BOTH)
    assert (best / "result.json").exists()  # the worker trained the best config there
    wait_for(lambda: not trial_processes(), 30, "a trial's processes left behind")


def test_commbench_inter_measures_between_the_nodes(
    slurm_nodes: dict[str, str], tmp_path: Path
) -> None:
    done = autotune(
        "commbench", "--launcher", "slurm", "--cluster", "local:2x1", "--groups", "inter",
        "--sizes", "1K:64K", "--ops", "all_reduce", "--results", str(tmp_path), "--json",
        env=slurm_nodes,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = report["rows"]
    assert rows and all(r["correct"] and r["ranks"] == 2 and r["group"] == "inter" for r in rows)
    job = (Path(report["folder"]) / "slurm_id").read_text().strip()
    assert accounting(job) == ("COMPLETED", BOTH)


def test_a_node_lost_mid_trial_is_node_fail_and_the_study_goes_on(
    slurm_nodes: dict[str, str], tmp_path: Path
) -> None:
    """The second node dies while the first trial's rank runs on it, and again in the run the
    launcher gives a node-failed trial once more; each time it is started again once SLURM
    has failed the job (NODE_FAIL). The trial is node_fail, the next one runs on both nodes,
    and no process of either is left on either node."""
    tuner = spawn_autotune(
        "run", *STUDY, "--trials", "2", "--results", str(tmp_path), env=slurm_nodes
    )
    first = tmp_path / "s" / "trials" / "0"
    try:
        for _ in range(2):
            wait_for(lambda: bool(ranks(NODES[1])), 600, "a rank on the second node")
            assert master_addr(ranks(NODES[1])[0]) == FIRST_NODE_ADDRESS
            job = (first / "slurm_id").read_text().strip()
            kill_node(NODES[1])
            assert accounting(job, seconds=180)[0] == "NODE_FAIL"
            subprocess.run(["bash", str(SLURM_SH), "--nodes", "2"], check=True, timeout=300)
        output = tuner.communicate(timeout=900)[0]
    finally:
        if tuner.poll() is None:
            os.killpg(tuner.pid, signal.SIGKILL)
    assert tuner.returncode == 0, output
    assert kinds(tmp_path) == ["node_fail", "ok"], output
    assert accounting(trial_jobs(tmp_path)[1]) == ("COMPLETED", BOTH)
    assert "running the trial once more" in (first / "log.txt").read_text()
    wait_for(lambda: not trial_processes(), 30, "a trial's processes left behind")


def test_a_slice_study_on_one_node_confirms_its_leader_on_both(
    slurm_nodes: dict[str, str], tmp_path: Path
) -> None:
    """A two-node job tuned on a one-node slice (`--trial-nodes 1`): its trial runs on one
    node and names it, its leader runs again on both, and the summary states the
    slice-to-full error measured there and the winner's figure from that launch."""
    done = autotune(
        "run", *STUDY, "--trials", "1", "--trial-nodes", "1", "--confirm-full", "1",
        "--results", str(tmp_path), env=slurm_nodes,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "slice-to-full error on 1 leaders measured at full size" in done.stdout
    trials = tmp_path / "s" / "trials"
    on_slice, full = (yaml.safe_load((trials / n / "config.yaml").read_text()) for n in "01")
    assert on_slice["nodes"] == 1 and on_slice["ran_on"] in NODES
    assert full["nodes"] == 2 and full["ran_on"] == BOTH
    result = json.loads((trials / "1" / "result.json").read_text())
    assert (result["nodes"], result["ran_on"]) == (2, BOTH)
    best = yaml.safe_load((tmp_path / "s" / "best" / "best.yaml").read_text())
    assert best["standing"]["tokens_per_s"] == pytest.approx(result["tokens_per_s"])
    assert f"{result['tokens_per_s']:,.0f} tok/s" in done.stdout
    assert best["slice"]["slice_to_full_error"]["configs"]
