"""The one torchrun command line: local trials, SLURM steps and the exported train.sh share it."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

RDZV_PORT = "$((20000 + (SLURM_JOB_ID * 7 + ${SLURM_STEP_ID:-0}) % 20000))"
"""The c10d rendezvous port of a SLURM job step, as shell arithmetic: each step of one job
(a trial inside the tuner's allocation) gets its own, and two jobs rarely share one."""


NODE_ADDRESS = (
    "node_addr() { scontrol -o show node \"$1\" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p'; }"
)
"""A shell function: the address SLURM reaches node $1 at (its NodeAddr), which need not be
what its name resolves to."""


def executable() -> str:
    """The torchrun of the Python running autotune, so trials use the same environment."""
    beside = Path(sys.executable).with_name("torchrun")
    return str(beside) if beside.exists() else "torchrun"


RANK_ENTRY = "autotune.rank"
"""The module every rank starts with: it notes the clock, then runs the worker module."""


def rank_words(worker_module: str) -> list[str]:
    """`python -m` words that start `worker_module` on a rank, through `RANK_ENTRY`."""
    return ["-m", RANK_ENTRY, worker_module]


def python_bin_first(path: str) -> str:
    """PATH with this Python's scripts folder first, so every trial, local or in a SLURM
    step, compiles engine ops with the same tools (DeepSpeed's ninja from its own
    dependencies, not the system's): ninja versions hash commands differently, so
    alternating them would rebuild DeepSpeed's CPU ops (minutes of compiling) at each
    switch."""
    return os.pathsep.join(filter(None, [str(Path(sys.executable).parent), path]))


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a multi-node run meet. Values are shell words, written as given,
    so `"$head:$port"` is expanded on the node that runs the line."""

    endpoint: str
    node_rank: str | None = None
    run_id: str | None = None
    local_addr: str | None = None
    """This node's address, which the first node's becomes the workers' MASTER_ADDR (torchrun
    takes its hostname's full name otherwise)."""
    is_host: str | None = None
    """1 on the node that serves the rendezvous store, 0 on the others (torchrun guesses it by
    matching the endpoint against its hostname's addresses otherwise)."""


LOOPBACK_AGENT = "autotune.rank.loopback"
"""torchrun with its stores listening on loopback only, for runs on this host alone."""


def one_host(nnodes: int, nprocs_per_node: int, log_dir: Path) -> list[str]:
    """torchrun and its options for a run on this host alone: its stores and its ranks'
    MASTER_ADDR on loopback, reachable from no other host; its own files in `log_dir` (a
    launch's folder), not a `torchelastic_*` folder of TMPDIR that nobody removes."""
    return [
        sys.executable,
        "-m",
        LOOPBACK_AGENT,
        *options(nnodes, nprocs_per_node, rendezvous=None),
        "--local-addr",
        "127.0.0.1",
        "--log-dir",
        str(log_dir),
    ]


def options(nnodes: int, nprocs_per_node: int, rendezvous: Rendezvous | None) -> list[str]:
    """torchrun's options for the layout; without a rendezvous, one standalone node. No
    restarts: a failed trial is a verdict, not something to retry behind autotune's back."""
    words = ["--nnodes", str(nnodes), "--nproc-per-node", str(nprocs_per_node)]
    if rendezvous is None:
        words.append("--standalone")
    else:
        if rendezvous.node_rank is not None:
            words += ["--node-rank", rendezvous.node_rank]
        words += ["--rdzv-backend", "c10d", "--rdzv-endpoint", rendezvous.endpoint]
        if rendezvous.run_id is not None:
            words += ["--rdzv-id", rendezvous.run_id]
        if rendezvous.local_addr is not None:
            words += ["--local-addr", rendezvous.local_addr]
        if rendezvous.is_host is not None:
            words += ["--rdzv-conf", f"is_host={rendezvous.is_host}"]
    return [*words, "--max-restarts", "0"]
