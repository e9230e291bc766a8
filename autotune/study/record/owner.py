"""Who holds a trial: the tuner process that asked it, by host, pid and start time, so a
trial whose tuner died can be told from one still running."""

from __future__ import annotations

import socket

import psutil


def owner_tag() -> str:
    """Who runs a trial: host, pid and process start time (pids are reused)."""
    me = psutil.Process()
    return f"{socket.gethostname()}:{me.pid}:{me.create_time():.3f}"


def owner_is_dead(tag: str) -> bool:
    """True only when the owner ran on this host and that exact process is gone."""
    host, _, rest = tag.partition(":")
    pid_text, _, created = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        return abs(psutil.Process(int(pid_text)).create_time() - float(created)) > 1e-3
    except psutil.NoSuchProcess:
        return True
