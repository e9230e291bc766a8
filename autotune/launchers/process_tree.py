"""Stopping a launched process and everything it started."""

from __future__ import annotations

import contextlib
import signal
import subprocess

import psutil

GRACE_S = 5.0
"""Between SIGTERM and SIGKILL when stopping a trial."""


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
