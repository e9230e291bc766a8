"""A tuner started in the background by a script inherits SIGINT ignored; it takes Ctrl-C
back."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.cli.app import restore_sigint


@pytest.fixture
def sigint_kept() -> Iterator[None]:
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("sigint_kept")
def test_an_ignored_sigint_is_restored_to_the_default_handler() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    restore_sigint()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.usefixtures("sigint_kept")
def test_a_sigint_handler_set_on_purpose_is_kept() -> None:
    def mine(signum: int, frame: object) -> None:
        return None

    signal.signal(signal.SIGINT, mine)
    restore_sigint()
    assert signal.getsignal(signal.SIGINT) is mine


SLOW_LOOP = """
import time
import torch.distributed as dist
from autotune import step

dist.init_process_group("gloo")
for _ in range(400):
    time.sleep(1.0)
    step.done(loss=1.0)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("signals", [(signal.SIGTERM,), (signal.SIGHUP,), (signal.SIGINT,) * 2])
def test_a_signal_mid_trial_leaves_it_interrupted_one_line_and_nothing_behind(
    tmp_path: Path, signals: tuple[signal.Signals, ...]
) -> None:
    """SIGHUP once left the trial RUNNING with no message, and it and a second Ctrl-C
    leaked the pool's folder."""
    import subprocess
    import time

    import optuna
    import psutil

    from autotune.trial.spec import TRIAL_ENV
    from tests.conftest import spawn_autotune

    (tmp_path / "slow.py").write_text(SLOW_LOOP)
    (tmp_path / "space.yaml").write_text("engine: torch\nknobs:\n  mbs: [1, 2]\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = spawn_autotune(
        "run", "--engine", "torch", "--space", str(tmp_path / "space.yaml"), "--cluster",
        "local:2", "--trials", "2", "--results", str(tmp_path / "res"), "--study", "s",
        "--users-config", "mbs=1", "--", str(tmp_path / "slow.py"),
        env={"TMPDIR": str(tmp)},
    )  # fmt: skip
    steps = tmp_path / "res" / "s" / "trials" / "0" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not steps.exists():
        time.sleep(0.2)
    time.sleep(2)  # the trial's ranks are in the user's loop
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.3)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    lines = [line for line in out.splitlines() if line.startswith("autotune: ")]
    assert proc.returncode == 130, out[-3000:]
    assert lines == ["autotune: interrupted"], out[-3000:]
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'res/s/study.db'}")
    kinds = [t.user_attrs.get("kind") for t in study.get_trials()]
    assert kinds and kinds[-1] == "interrupted" and None not in kinds
    # no pool folder, no torchelastic_* (torch's own inductor cache may stay: it is one)
    assert sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor")) == []
    left = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TRIAL_ENV, "").startswith(str(tmp_path)):
                left.append(p)
        except psutil.Error:
            continue
    assert left == []


SIGNAL_AT = """
import os, signal, sys
import autotune.export.best as best
import autotune.report.html as html
import autotune.study.loop as loop

phase, signals = sys.argv[1], [getattr(signal, s) for s in sys.argv[2].split(",")]
calls = {"planning": 0, "between trials": 0, "export": 0, "report": 0}


def at(name, function, nth=1):
    def signalled(*args, **kwargs):
        calls[name] += 1
        if name == phase and calls[name] == nth:
            for sig in signals:
                os.kill(os.getpid(), sig)
        return function(*args, **kwargs)
    return signalled


loop.memory_verdicts = at("planning", loop.memory_verdicts)
loop.run_one = at("between trials", loop.run_one, nth=2)
best._write_all = at("export", best._write_all)
html.trial_table = at("report", html.trial_table)
sys.argv = ["autotune", *sys.argv[3:]]
from autotune.cli.app import main
main()
"""


@pytest.mark.parametrize(
    ("phase", "signals"),
    [
        ("planning", "SIGTERM"),
        ("between trials", "SIGTERM"),
        ("between trials", "SIGHUP"),
        ("between trials", "SIGINT,SIGINT"),
        ("export", "SIGHUP"),
        ("report", "SIGINT,SIGINT"),
    ],
)
def test_a_signal_at_each_phase_of_a_run_is_one_line_and_leaves_nothing_half_done(
    tmp_path: Path, phase: str, signals: str
) -> None:
    """Before any trial, between two trials, while best/ is written and while the report
    is: exit 130, `autotune: interrupted` alone, no trial left running, no staging folder or
    temporary file, and the same command then resumes to the end. A trial asked but not yet
    launched was once left RUNNING, and a resumed study that measured nothing more never
    wrote the report the signal had cut short. (Every signal mid-trial: the slow test above.)"""
    import os
    import subprocess
    import sys

    import optuna

    results, tmp = tmp_path / "res", tmp_path / "tmp"
    tmp.mkdir()
    run = ("run", "--launcher", "simulate", "--trials", "3", "--study", "s",
           "--results", str(results))  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp)}
    argv = [sys.executable, "-c", SIGNAL_AT, phase, signals, *run]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    said = [line for line in done.stderr.splitlines() if line.startswith("autotune")]
    assert (done.returncode, said) == (130, ["autotune: interrupted"]), done.stderr[-3000:]
    assert list(tmp.iterdir()) == []
    folder = results / "s"
    assert [p.name for p in folder.glob(".*")] == []
    assert not (folder / "report.html").exists() or phase != "report"
    if folder.exists():
        storage = f"sqlite:///{folder / 'study.db'}"
        with contextlib.suppress(KeyError):
            study = optuna.load_study(study_name="s", storage=storage)
            states = {t.state for t in study.trials}
            assert optuna.trial.TrialState.RUNNING not in states, states
    again = subprocess.run(
        [sys.executable, "-m", "autotune", *run], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert (folder / "best" / "best.yaml").exists() and (folder / "report.html").exists()
