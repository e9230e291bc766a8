"""torchrun on this host, in its own session; killed by process tree on timeout or Ctrl-C.

Trials of the built-in engines run in a warm pool (`warm_pool.py`) that serves trial after
trial of the same world (a DeepSpeed pipeline launches afresh); the user's own DeepSpeed or
`autotune.step` command on gloo runs in a forked pool, a fresh process per trial from ranks
that imported its framework once; the rest launch afresh (`LaunchRequest.pool`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import time

from autotune.errors import InputError
from autotune.launchers import torchrun
from autotune.launchers.base import LOG_FILE, Launcher, LaunchOutcome, LaunchRequest, classify
from autotune.launchers.log_limit import bound
from autotune.launchers.process_tree import start_tree, stop_tree
from autotune.launchers.warm_pool import WarmPool, pool_key
from autotune.problem import Problem
from autotune.space.transformer_engine import without_transformer_engine
from autotune.specs.cluster import Cluster
from autotune.trial.spec import LAUNCH_EPOCH_ENV, NCCL_TUNED

TORCHRUN_DIR = "torchelastic"
"""torchrun's own folder, in the trial's."""
POLL_S = 0.5
"""How often a running trial's time limit is checked (its exit wakes the wait at once)."""


def has_transformer_engine() -> bool:
    """Imported as the worker imports it: installed but broken (a CUDA or torch mismatch)
    counts as absent."""
    try:
        import transformer_engine  # noqa: F401
    except Exception:
        return False
    return True


class LocalLauncher(Launcher):
    name = "local"

    def __init__(self) -> None:
        self._pool: WarmPool | None = None

    def check(self, cluster: Cluster) -> None:
        """One host only: several nodes meet through SLURM."""
        if cluster.nodes > 1:
            raise InputError(
                f"cluster {cluster.name} has {cluster.nodes} nodes; the local launcher runs "
                "one: use --launcher slurm"
            )

    def narrow(self, problem: Problem) -> Problem:
        """Without Transformer Engine here, no context parallelism (megatron-core's own
        attention has none) and no tensor-parallel overlap (its userbuffers are TE's), so
        every such trial would crash."""
        if has_transformer_engine():
            return problem
        space = without_transformer_engine(problem.space, "this host")
        return dataclasses.replace(problem, space=space)

    def command(self, request: LaunchRequest) -> list[str]:
        return [
            *torchrun.one_host(
                request.nnodes, request.nprocs_per_node, request.folder / TORCHRUN_DIR
            ),
            *torchrun.rank_words(request.worker_module),
            request.worker_file,
        ]

    def run(self, request: LaunchRequest) -> LaunchOutcome:
        if request.pool is not None:
            return self._run_pooled(request)
        self.close()  # the devices go to this trial
        launched = time.time()
        env = {**launch_environment(request.env), LAUNCH_EPOCH_ENV: repr(launched)}
        start = time.monotonic()
        proc = start_tree(self.command(request), request.folder, env, request.folder / LOG_FILE)
        timed_out = False
        try:
            while proc.poll() is None:
                if time.monotonic() - start > request.time_limit_s:
                    timed_out = True
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=POLL_S)
                bound(request.folder / LOG_FILE)
        except BaseException:
            stop_tree(proc)
            raise
        stop_tree(proc)  # on timeout; else stragglers in their own sessions
        wall_s = time.monotonic() - start
        return classify(request.folder, proc.returncode, timed_out, wall_s, since=launched)

    def ran_on(self, request: LaunchRequest) -> str | None:
        return socket.gethostname()

    def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.close()

    def _run_pooled(self, request: LaunchRequest) -> LaunchOutcome:
        key = pool_key(request)
        if self._pool is not None and (self._pool.key != key or not self._pool.alive):
            self.close()
        if self._pool is None:
            try:
                self._pool = WarmPool(key, launch_environment(dict(key.env)))
            except OSError:  # no socket or process for a pool here: launch the trial alone
                return self.run(dataclasses.replace(request, pool=None))
        outcome = self._pool.run(request)
        if not self._pool.alive:
            self.close()
        return outcome


def launch_environment(trial_env: dict[str, str]) -> dict[str, str]:
    """This process's environment without NCCL settings of its own, this Python's tools
    first, and the trial's variables."""
    inherited = {k: v for k, v in os.environ.items() if k not in NCCL_TUNED}
    return {**inherited, "PATH": torchrun.python_bin_first(inherited.get("PATH", "")), **trial_env}
