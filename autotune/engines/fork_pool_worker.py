"""A forking pool's rank: the worker's imports paid once, then a fresh process forked for
each trial, which runs the worker from its start as a one-trial launch would.

torchrun starts `python -m autotune.engines.fork_pool_worker <worker module> <socket>` on
every rank (launchers/warm_pool.py, a pool of kind `forked`). Each rank imports the worker
module (a user's command's job worker: torch, DeepSpeed) and what its `preload()` names
(DeepSpeed's compiled ops), connects to the launcher's socket and waits. For each trial it
forks a child that takes the trial's environment, a process group of its own on the port
the launcher chose, the trial's log as its output, and runs the
worker's `main()` on the trial's file: the user's script runs from its first line in a
process no other trial has touched, so nothing of an earlier trial's state can carry over, as
it could in a warm pool's ranks. The rank answers with the child's exit status. The rank
itself never starts a process group, a device context or a thread of its own: forking is
safe only before those exist, which is why forked pools serve gloo worlds alone.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the heavy imports, so the pool's first trial shows them

import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from multiprocessing.connection import Client, Connection  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any, NoReturn  # noqa: E402

from autotune.engines import worker  # noqa: E402
from autotune.trial.lifetime import die_with_parent  # noqa: E402
from autotune.trial.spec import LAUNCH_EPOCH_ENV, TRIAL_FILE  # noqa: E402

AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"
"""torchrun's word that ranks join its own store: a trial's ranks make a store of their own
on the launcher's port instead, since the keys an earlier trial's process group left in
torchrun's store would be taken for this one's."""


def main() -> None:
    die_with_parent()
    worker.clear_stale_build_locks()
    name, address = sys.argv[1], sys.argv[2]
    module = importlib.import_module(name)
    import torch._dynamo  # noqa: F401  torch.optim's first optimizer imports it: 1.2 s a trial

    if (preload := getattr(module, "preload", None)) is not None:
        preload()
    gc.freeze()  # the imports' objects are shared with the children page for page
    rank = int(os.environ.get("RANK", "0"))
    conn = Client(address, family="AF_UNIX")
    conn.send_bytes(json.dumps({"rank": rank}).encode())
    first = True
    while (request := json.loads(conn.recv_bytes())).get("folder"):
        started = STARTED if first else time.time()
        sys.stdout.flush()  # what the rank printed stays its own, not every child's
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(module, conn, request, started, parent)
        _, status = os.waitpid(pid, 0)
        conn.send_bytes(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())
        first = False
    conn.close()
    worker.exit_now()


def _child(
    module: ModuleType, conn: Connection, request: dict[str, Any], started: float, parent: int
) -> NoReturn:
    """One trial's rank, as `python -m <worker module> trial.json` would run it."""
    try:
        die_with_parent(parent)  # a fork clears it; a rank killed right now takes this too
        conn.close()  # the socket is the pool rank's; this process only writes its files
        _reseed()
        with worker.output_to(request["log"]):  # never left: the child ends inside
            _run(module, request, started)
    finally:
        os._exit(1)  # whatever escaped: the child never returns into the pool's loop


def _run(module: ModuleType, request: dict[str, Any], started: float) -> NoReturn:
    try:
        os.environ.update(request["env"])
        os.environ.pop(AGENT_STORE_ENV, None)
        os.environ["MASTER_PORT"] = str(request["port"])
        os.environ[LAUNCH_EPOCH_ENV] = repr(request["launched"])
        os.chdir(request["folder"])
        worker.STARTED = started  # the clock's launch and import phases: what this trial paid
        trial_file = os.path.join(request["folder"], TRIAL_FILE)
        sys.argv = [module.__file__ or module.__name__, trial_file]
        module.main()
    except SystemExit as exc:  # as the interpreter ends on it
        if exc.code is None or isinstance(exc.code, int):
            worker.exit_now(exc.code or 0)
        print(exc.code, file=sys.stderr)
        worker.exit_now(1)
    except BaseException:
        traceback.print_exc()
        worker.exit_now(1)
    worker.exit_now()


def _reseed() -> None:
    """A fresh interpreter's random draws, not the pool rank's: Python's, and NumPy's global
    generator where something imported it (torch's is seeded the same in every process)."""
    random.seed()
    if (numpy := sys.modules.get("numpy")) is not None:
        numpy.random.seed()


if __name__ == "__main__":
    main()
