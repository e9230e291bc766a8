"""Process lifetime: a trial's processes never outlive the process that started them."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux only).

    The local launcher sets it on torchrun and every worker sets it for itself, so a tuner
    killed with -9 takes torchrun with it, and torchrun its workers.
    """
    parent = parent_pid if parent_pid is not None else os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)
