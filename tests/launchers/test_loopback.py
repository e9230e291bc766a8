"""A one-host study's stores listen on loopback only: torchrun's rendezvous store, the store
its ranks share and a forked trial's own store are reachable from no other host."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil
import pytest

from autotune.launchers import LaunchOutcome, get_launcher
from autotune.launchers.base import LaunchRequest
from autotune.rank.loopback import loopback_store
from tests.paths import REPO

WILDCARDS = ("0.0.0.0", "::")
PROBE = """
import json, os, pathlib, time
import torch.distributed as dist

def main(args, started):
    dist.init_process_group("gloo")
    dist.barrier()
    here = pathlib.Path.cwd()
    if dist.get_rank() == 0:
        (here / "ready").write_text(json.dumps({"MASTER_ADDR": os.environ["MASTER_ADDR"]}))
    deadline = time.monotonic() + 120
    while not (here / "done").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    dist.barrier()
    dist.destroy_process_group()
"""


def listeners(root: psutil.Process) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket in `root`'s tree."""
    found = []
    for proc in root.children(recursive=True):
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((proc.name(), conn.laddr.ip, conn.laddr.port))
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_a_local_trials_stores_listen_on_loopback_only(tmp_path: Path) -> None:
    (tmp_path / "probe_listen.py").write_text(PROBE)
    folder = tmp_path / "t"
    folder.mkdir()
    request = LaunchRequest(
        folder=folder,
        worker_module="probe_listen",
        nprocs_per_node=2,
        env={"PYTHONPATH": f"{tmp_path}:{REPO}"},
        time_limit_s=180,
    )
    launcher = get_launcher("local")
    outcomes: list[LaunchOutcome] = []
    runner = threading.Thread(target=lambda: outcomes.append(launcher.run(request)))
    runner.start()
    try:
        deadline = time.monotonic() + 150
        while not (folder / "ready").exists() and runner.is_alive():
            assert time.monotonic() < deadline, "the ranks never met"
            time.sleep(0.1)
        found = listeners(psutil.Process())
        ready = (folder / "ready").read_text()
    finally:
        (folder / "done").touch()
        runner.join(timeout=120)
    assert found, "no listening socket seen"
    assert not [s for s in found if s[1] in WILDCARDS], found
    assert '"MASTER_ADDR": "127.0.0.1"' in ready


def test_a_server_store_on_loopback_listens_there_alone() -> None:
    """As a forked trial's rank 0 makes its store (MASTER_ADDR 127.0.0.1)."""
    store = loopback_store("127.0.0.1", 0, 1, True, wait_for_workers=False)
    store.set("k", "v")
    mine = [
        c.laddr.ip
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == store.port
    ]
    assert mine == ["127.0.0.1"]
