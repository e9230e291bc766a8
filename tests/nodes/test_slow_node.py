"""A slow node on the real two-node SLURM (scripts/slurm.sh --nodes 2): node at2n2's slurmd,
and so every job step it starts, is held to a fifth of a core by a cgroup CPU quota. The node
check before a study names it, its compute a fraction of the healthy node's; a study of
one-node trials runs on the healthy node, where without the check the same trial on the
slow node reads its config several times slower; a study that needs both nodes is refused
in one line. (`autotune nodes` on the healthy cluster: tests/launchers/test_slurm_nodes.py.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from tests.conftest import autotune

pytestmark = pytest.mark.slow
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
SLOW_NODE, HEALTHY_NODE = "at2n2", "at2n1"
ONE_NODE = (
    "--launcher", "slurm", "--engine", "torch", "--sampler", "grid", "--no-confirm",
    "--no-early-stop", "--measured-steps", "3", "--study", "s",
)  # fmt: skip


@pytest.fixture
def slow_node(slurm_nodes: dict[str, str]) -> Iterator[dict[str, str]]:
    """at2n2's slurmd in a cgroup with a CPU quota of 20 ms per 100 ms, put back after."""
    if not (CPU_CGROUP / "cgroup.procs").exists() or os.geteuid() != 0:
        pytest.skip("needs root and the cgroup v1 cpu controller")
    pid = Path(f"/run/slurmd-{SLOW_NODE}.pid").read_text().strip()
    group = CPU_CGROUP / "autotune-slow-node"
    group.mkdir(exist_ok=True)
    (group / "cpu.cfs_period_us").write_text("100000")
    (group / "cpu.cfs_quota_us").write_text("20000")
    (group / "cgroup.procs").write_text(pid)
    try:
        yield slurm_nodes
    finally:
        for stuck in (group / "cgroup.procs").read_text().split():
            (CPU_CGROUP / "cgroup.procs").write_text(stuck)
        group.rmdir()


def _study(results: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{results / 's' / 'study.db'}")


def _env(slurm: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **slurm}


def test_a_study_keeps_its_trials_off_the_slow_node_which_would_skew_them_or_says_it_cannot(
    slow_node: dict[str, str], tmp_path: Path
) -> None:
    results = tmp_path / "results"
    one = ("--cluster", "local:1x1", "--trials", "1", "--results", str(results))
    ran = autotune("run", *ONE_NODE, *one, env=_env(slow_node), cwd=tmp_path, timeout=900)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f"kept out of trials: {SLOW_NODE}" in ran.stdout
    placed = [
        (f / "slurm_nodes").read_text().strip() for f in (results / "s" / "trials").iterdir()
    ]
    assert placed and set(placed) == {HEALTHY_NODE}, placed
    study = _study(results)
    check = study.user_attrs["node_check"]  # the check named it, by its compute
    assert list(check["slow"]) == [SLOW_NODE] and "compute" in check["slow"][SLOW_NODE], check
    compute = {r["node"]: r["compute_tflops"] for r in check["nodes"]}
    assert compute[HEALTHY_NODE] > 2 * compute[SLOW_NODE], compute
    (kept,) = [t.value for t in study.trials if t.value is not None]

    # Without the check, the same study's trial pinned to the slow node reads its config
    # several times slower: the figures would be the node's, not the config's.
    skewed = tmp_path / "skewed"
    pinned = (
        "--cluster", "local:1x1", "--trials", "1", "--results", str(skewed),
        "--no-node-check", f"--sbatch-option=--nodelist={SLOW_NODE}",
    )  # fmt: skip
    ran = autotune("run", *ONE_NODE, *pinned, env=_env(slow_node), cwd=tmp_path, timeout=900)
    assert ran.returncode == 0, ran.stderr[-3000:]
    (slow,) = [t for t in _study(skewed).trials if t.value is not None]
    assert slow.user_attrs["config_key"] == study.trials[0].user_attrs["config_key"]
    assert kept > 2 * slow.value, (kept, slow.value)

    both = ("--cluster", "local:2x1", "--trials", "1", "--results", str(tmp_path / "both"))
    refused = autotune("run", *ONE_NODE, *both, env=_env(slow_node), cwd=tmp_path, timeout=600)
    assert refused.returncode == 2, refused.stderr[-3000:]
    line = refused.stderr.strip()
    assert "\n" not in line and SLOW_NODE in line and "need 2 nodes" in line, line
    assert not (tmp_path / "both" / "s" / "trials").exists()


def test_a_trial_spanning_the_slow_node_is_named_for_it_not_ranked_and_stops_the_study(
    slow_node: dict[str, str], tmp_path: Path
) -> None:
    """Unchecked (--no-node-check), a trial on both nodes runs at the slow node's pace; its
    profiled step shows that node's compute far over its peer's, so the trial is recorded as
    run on a slow node, not as its config's speed; once a second trial finds it slow too, a
    study whose trials need both nodes stops in one line naming it."""
    results = tmp_path / "results"
    both = (
        "--cluster", "local:2x1", "--trials", "3", "--results", str(results),
        "--no-node-check",
    )  # fmt: skip
    ran = autotune("run", *ONE_NODE, *both, env=_env(slow_node), cwd=tmp_path, timeout=900)
    assert ran.returncode == 1, ran.stderr[-3000:]
    trials = _study(results).trials
    assert len(trials) == 2, [t.user_attrs.get("error") for t in trials]
    for trial in trials:
        assert trial.user_attrs["kind"] == "slow_node" and trial.value is None
        assert trial.user_attrs["error"].startswith(f"slow node {SLOW_NODE} (compute ")
        assert HEALTHY_NODE not in trial.user_attrs["error"]
    said = ran.stdout + ran.stderr
    assert "1 node(s) are left where the study's trials need 2: fix or drain it" in said, said
