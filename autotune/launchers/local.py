"""torchrun on this host, in its own session; killed by process tree on timeout or Ctrl-C."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from autotune.launchers import torchrun
from autotune.launchers.base import LOG_FILE, Launcher, LaunchOutcome, LaunchRequest, classify
from autotune.trial.lifetime import die_with_parent
from autotune.trial.spec import LAUNCH_EPOCH_ENV, NCCL_TUNED

GRACE_S = 5.0
"""Between SIGTERM and SIGKILL when stopping a trial."""
POLL_S = 0.5
"""How often a running trial's time limit and streamed step times are checked."""


class LocalLauncher(Launcher):
    name = "local"

    def command(self, request: LaunchRequest) -> list[str]:
        return [
            torchrun.executable(),
            *torchrun.options(request.nnodes, request.nprocs_per_node, rendezvous=None),
            "-m",
            request.worker_module,
            request.worker_file,
        ]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        inherited = {k: v for k, v in os.environ.items() if k not in NCCL_TUNED}
        env = {
            **inherited,
            "PATH": python_bin_first(inherited.get("PATH", "")),
            **request.env,
            LAUNCH_EPOCH_ENV: repr(time.time()),
        }
        start = time.monotonic()
        with (request.folder / LOG_FILE).open("ab") as log:
            proc = subprocess.Popen(
                self.command(request),
                cwd=request.folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
            )
        timed_out = False
        try:
            while proc.poll() is None:
                if time.monotonic() - start > request.time_limit_s:
                    timed_out = True
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=POLL_S)
        except BaseException:
            stop_tree(proc)
            raise
        stop_tree(proc)  # on timeout; else stragglers in their own sessions
        return classify(request.folder, proc.returncode, timed_out, time.monotonic() - start)


def python_bin_first(path: str) -> str:
    """PATH with this Python's scripts folder first, so every trial compiles engine ops with
    the same tools (DeepSpeed's ninja from its own dependencies, not the system's): ninja
    versions hash commands differently, and alternating them rebuilt DeepSpeed's CPU ops
    (30-60 s here) in every trial."""
    return os.pathsep.join(filter(None, [str(Path(sys.executable).parent), path]))


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
