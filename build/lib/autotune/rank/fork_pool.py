"""A forking pool's rank: the worker's imports paid once, then a fresh process forked for
each trial, which runs the worker from its start as a one-trial launch would.

torchrun starts `python -m autotune.rank autotune.rank.fork_pool <worker module> <socket>` on
every rank (launchers/warm_pool.py, a pool of kind `forked`). Each rank imports the worker
module (a user's command's job worker: torch, DeepSpeed) and what its `preload()` names
(DeepSpeed's compiled ops), connects to the launcher's socket and waits. For each trial it
forks a child that takes the trial's environment, a process group of its own on the port
the launcher chose, the trial's log as its output, and runs the
worker's `main` on the trial's file: the user's script runs from its first line in a
process no other trial has touched, so nothing of an earlier trial's state can carry over, as
it could in a warm pool's ranks. The rank answers with the child's exit status. The rank
itself never starts a process group, a device context or a thread of its own: forking is
safe only before those exist, which is why forked pools serve gloo worlds alone.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import random
import sys
import time
import traceback
from multiprocessing.connection import Client, Connection
from types import ModuleType
from typing import Any, NoReturn

from autotune.rank import build_lock, harness, loopback
from autotune.trial.lifetime import die_with_parent
from autotune.trial.spec import LAUNCH_EPOCH_ENV, TRIAL_FILE

AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"
"""torchrun's word that ranks join its own store: a trial's ranks make a store of their own
on the launcher's port instead, since the keys an earlier trial's process group left in
torchrun's store would be taken for this one's."""


def main(args: list[str], started: float) -> None:
    """Fork a child per trial of the worker `args[0]` sent on the socket `args[1]`."""
    die_with_parent()
    name, address = args
    module = importlib.import_module(name)
    import torch._dynamo  # noqa: F401  torch.optim's first optimizer imports it, slowly

    # Not while a build lock is left: the load would wait on it; each trial settles it.
    preload = getattr(module, "preload", None)
    if preload is not None and not build_lock.clear_stale():
        preload()
    gc.freeze()  # the imports' objects are shared with the children page for page
    rank = int(os.environ.get("RANK", "0"))
    conn = Client(address, family="AF_UNIX")
    conn.send_bytes(json.dumps({"rank": rank}).encode())
    first = True
    while (request := json.loads(conn.recv_bytes())).get("folder"):
        trial_started = started if first else time.time()
        sys.stdout.flush()  # what the rank printed stays its own, not every child's
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(module, conn, request, trial_started, parent)
        _, status = os.waitpid(pid, 0)
        conn.send_bytes(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())
        first = False
    conn.close()
    harness.exit_now()


def _child(
    module: ModuleType, conn: Connection, request: dict[str, Any], started: float, parent: int
) -> NoReturn:
    """One trial's rank, as `python -m <worker module> trial.json` would run it."""
    try:
        die_with_parent(parent)  # a fork clears it; a rank killed right now takes this too
        conn.close()  # the socket is the pool rank's; this process only writes its files
        _reseed()
        with harness.output_to(request["log"]):  # never left: the child ends inside
            _run(module, request, started)
    finally:
        os._exit(1)  # whatever escaped: the child never returns into the pool's loop


def _run(module: ModuleType, request: dict[str, Any], started: float) -> NoReturn:
    try:
        os.environ.update(request["env"])
        os.environ.pop(AGENT_STORE_ENV, None)
        os.environ["MASTER_PORT"] = str(request["port"])
        if os.environ.get("MASTER_ADDR") in loopback.LOOPBACK_NAMES:
            loopback.bind_stores()  # rank 0's store, on loopback as the pool's are
        os.environ[LAUNCH_EPOCH_ENV] = repr(request["launched"])
        os.chdir(request["folder"])
        trial_file = os.path.join(request["folder"], TRIAL_FILE)
        module.main([trial_file], started)  # its clock: what this trial paid
    except SystemExit as exc:  # as the interpreter ends on it
        if exc.code is None or isinstance(exc.code, int):
            harness.exit_now(exc.code or 0)
        print(exc.code, file=sys.stderr)
        harness.exit_now(1)
    except BaseException:
        traceback.print_exc()
        harness.exit_now(1)
    harness.exit_now()


def _reseed() -> None:
    """A fresh interpreter's random draws, not the pool rank's: Python's, and NumPy's global
    generator where something imported it (torch's is seeded the same in every process)."""
    random.seed()
    if (numpy := sys.modules.get("numpy")) is not None:
        numpy.random.seed()
