"""A pool: one torchrun whose ranks stay alive across trials of the same world, so what a
launch pays before the trial proper is paid once, not per trial.

A warm pool's ranks (`rank/warm_pool.py`) run trial after trial themselves: imports, the
world process group and the device context are paid once. A forked pool's ranks
(`rank/fork_pool.py`) fork a fresh process for each trial, which starts its own
process group on a port chosen here: the imports are paid once, the rest as in a launch of
its own (a user's command runs from its first line). The ranks connect to a Unix socket
here; each trial is one message to every rank and one answer from each. A pool serves
trials with the same worker, world and environment (NCCL reads its variables once per
process, so a trial with other NCCL settings gets a pool of its own). A trial that fails,
or outlives its time limit, takes the pool down and the next trial starts a fresh one.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

from autotune.launchers import torchrun
from autotune.launchers.base import LOG_FILE, LaunchOutcome, LaunchRequest, classify
from autotune.launchers.log_limit import bound, read_bounded
from autotune.launchers.process_tree import start_tree, stop_tree
from autotune.trial.spec import FAULT_ENV, LAUNCH_EPOCH_ENV, TRIAL_ENV, PoolKind

POOL_WORKERS: dict[PoolKind, str] = {
    "warm": "autotune.rank.warm_pool",
    "forked": "autotune.rank.fork_pool",
}
PER_TRIAL_ENV = (FAULT_ENV, TRIAL_ENV)
"""Variables a pooled rank sets for one trial only; every other one is the pool's."""
MAX_TRIALS = 24
"""Trials one pool serves before a fresh one (the default study and its repeats fit in
one): each trial's process groups are destroyed after it (rank/warm_pool.py), but what else
an engine keeps in its modules across trials is recycled with the pool before it adds up."""
POLL_S = 0.5
"""How often the time limit is checked while waiting for the ranks (answers and exits
wake the wait at once)."""
POOL_LOG = "pool.log"


@dataclass(frozen=True)
class PoolKey:
    """What trials must share to run in the same pool."""

    kind: PoolKind
    worker_module: str
    nprocs_per_node: int
    nnodes: int
    env: tuple[tuple[str, str], ...]


def pool_key(request: LaunchRequest) -> PoolKey:
    assert request.pool is not None
    shared = {k: v for k, v in request.env.items() if k not in PER_TRIAL_ENV}
    return PoolKey(
        request.pool,
        request.worker_module,
        request.nprocs_per_node,
        request.nnodes,
        tuple(sorted(shared.items())),
    )


class WarmPool:
    """One torchrun of pool ranks (warm or forked), started by the first trial it serves."""

    def __init__(self, key: PoolKey, env: dict[str, str]) -> None:
        self.key = key
        self.served = 0
        self._dir = Path(tempfile.mkdtemp(prefix="autotune-pool-"))
        self._started = time.time()
        address = str(self._dir / "control.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._ranks: list[Connection] = []
        self._stopped = False
        try:
            self._server.bind(address)  # fails where the temp folder's path is too long
            self._server.listen(key.nprocs_per_node * key.nnodes)
            self._server.settimeout(POLL_S)
            self._proc = self._start(key, address, env)
        except OSError:
            self._server.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def _start(self, key: PoolKey, address: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        command = [
            *torchrun.one_host(key.nnodes, key.nprocs_per_node, self._dir / "torchelastic"),
            *torchrun.rank_words(POOL_WORKERS[key.kind]),
            key.worker_module,
            address,
        ]
        env = {**env, LAUNCH_EPOCH_ENV: repr(self._started)}
        return start_tree(command, self._dir, env, self._dir / POOL_LOG)

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None and self.served < MAX_TRIALS

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        """One trial on every rank; on failure or timeout the pool is stopped."""
        start = time.monotonic()
        since = time.time()
        deadline = start + request.time_limit_s
        launched = self._started if self.served == 0 else time.time()
        self.served += 1
        try:
            code = (
                self._send_and_wait(request, launched, deadline)
                if self._connect(deadline)
                else None
            )
        except BaseException:  # Ctrl-C: the trial's ranks are stopped, not asked
            self._stop_now()
            raise
        wall_s = time.monotonic() - start
        if code == 0:
            return classify(request.folder, 0, False, wall_s, since=since)
        timed_out = time.monotonic() >= deadline
        self._stop_now(log_to=request.folder / LOG_FILE)
        # Not 0 even where stopping reaped torchrun before Popen could read its status: a
        # pool that ended mid-trial failed, whatever it exited with.
        return classify(
            request.folder, code or self._proc.returncode or 1, timed_out, wall_s, since=since
        )

    def close(self) -> None:
        """Ranks leave their process group and exit; stopped if they do not."""
        with contextlib.suppress(OSError):
            for conn in self._ranks:
                conn.send_bytes(json.dumps({"folder": None}).encode())
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=POLL_S * 10)
        self._stop_now()

    def _connect(self, deadline: float) -> bool:
        """Every rank's connection, in rank order; False if the pool died or time ran out."""
        wanted = self.key.nprocs_per_node * self.key.nnodes
        found: dict[int, Connection] = {}
        while len(self._ranks) + len(found) < wanted:
            if self._proc.poll() is not None or time.monotonic() >= deadline:
                return False
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                continue
            sock.setblocking(True)
            conn = Connection(sock.detach())
            try:
                found[json.loads(conn.recv_bytes())["rank"]] = conn
            except (OSError, EOFError, ValueError, KeyError):  # a rank that died connecting
                return False
        self._ranks += [found[r] for r in sorted(found)]
        return True

    def _send_and_wait(
        self, request: LaunchRequest, launched: float, deadline: float
    ) -> int | None:
        """0 once every rank is done; a forked trial's first non-zero exit status; None if a
        rank died or time ran out."""
        message = {
            "folder": str(request.folder.resolve()),
            "log": str((request.folder / LOG_FILE).resolve()),
            "env": {k: v for k, v in request.env.items() if k in PER_TRIAL_ENV},
            "launched": launched,
            # A forked trial's process group; a warm pool's ranks keep theirs.
            **({"port": free_port()} if self.key.kind == "forked" else {}),
        }
        try:
            for conn in self._ranks:
                conn.send_bytes(json.dumps(message).encode())
            waiting = list(self._ranks)
            while waiting:
                if time.monotonic() >= deadline:
                    return None
                bound(request.folder / LOG_FILE)
                for ready in wait(waiting, timeout=POLL_S):
                    assert isinstance(ready, Connection)
                    # A rank that died raises EOFError; a forked trial's rank that failed
                    # answers its exit status, and the others may wait on it for ever.
                    if code := json.loads(ready.recv_bytes()).get("code", 0):
                        return int(code)
                    waiting.remove(ready)
        except (OSError, EOFError):
            return None
        return 0

    def _stop_now(self, log_to: Path | None = None) -> None:
        """Stop the ranks and torchrun, append torchrun's own lines to `log_to` (a failed
        trial's log), and remove the pool's folder."""
        if self._stopped:
            return
        self._stopped = True
        for conn in self._ranks:
            conn.close()
        self._ranks = []
        self._server.close()
        stop_tree(self._proc)
        if log_to is not None:
            with contextlib.suppress(OSError), log_to.open("a") as log:
                log.write(read_bounded(self._dir / POOL_LOG))
        shutil.rmtree(self._dir, ignore_errors=True)


def free_port() -> int:
    """A port no one listens on now, for a forked trial's rank 0 to take (its store listens
    on loopback, as the pool's torchrun's do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
