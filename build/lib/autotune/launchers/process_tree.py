"""Starting a launch in its own session, tied to this process, and stopping it with
everything it started; once it has ended, stopping what it left behind (`sweep`): a child
the user's command started in a session of its own (`setsid`, a double fork) is re-parented
away from the launch, but carries the trial's name in its environment."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
from pathlib import Path

import psutil

from autotune.trial.lifetime import die_with_parent
from autotune.trial.spec import TRIAL_ENV

GRACE_S = 5.0
"""Between SIGTERM and SIGKILL when stopping a trial."""


def start_tree(
    command: list[str], cwd: Path, env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """The command in its own session (a Ctrl-C meant for the tuner does not reach it), its
    output appended to `log`, killed by the kernel if this process dies."""
    with log.open("ab") as out:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=functools.partial(die_with_parent, os.getpid()),
        )


def stop_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after a grace period, to the process and all its descendants."""
    try:
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        _signal(p, signal.SIGTERM)
    _, alive = psutil.wait_procs(tree, timeout=GRACE_S)
    for p in alive:
        _signal(p, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=GRACE_S)
    proc.poll()


def _signal(p: psutil.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        p.send_signal(sig)


def sweep(token: str) -> tuple[str, ...]:
    """Stop every process of this user on this host still running with `token` as its trial
    (`TRIAL_ENV`: a trial's processes inherit it), SIGTERM then SIGKILL; what was stopped,
    as `name (pid N)`, for the summary."""
    left = []
    for p in psutil.process_iter(["pid", "name"]):
        with contextlib.suppress(psutil.Error):  # gone, another user's, a zombie
            if p.pid != os.getpid() and p.environ().get(TRIAL_ENV) == token:
                left.append(p)
    if not left:
        return ()
    named = tuple(f"{p.info['name']} (pid {p.pid})" for p in left)
    for p in left:
        _signal(p, signal.SIGTERM)
    _, alive = psutil.wait_procs(left, timeout=GRACE_S)
    for p in alive:
        _signal(p, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=GRACE_S)
    return named
