"""A warm pool's rank: imports, the world process group and the device context paid once,
then trial after trial, each building its engine afresh.

torchrun starts `python -m autotune.rank autotune.rank.warm_pool <engine worker module>
<socket>` on every rank (launchers/warm_pool.py). Each rank connects to the launcher's socket
and waits for a trial folder; it runs the trial with `harness.py` (the same code a one-trial
launch runs), its output appended to the trial's log, destroys the process groups the
trial made, puts back what it patched in torch (`torch_patches.py`), and answers when
every rank is done. A trial that fails writes its `error-rank<N>.json` and ends the rank,
which takes the pool down: the next trial starts a fresh one, so no trial runs in a process
a failure left.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Client, Connection
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from autotune.rank import harness, torch_patches
from autotune.rank.measure import reset_peak_memory
from autotune.trial.lifetime import die_with_parent
from autotune.trial.spec import TRIAL_FILE, TrialSpec


def main(args: list[str], started: float) -> None:
    """Serve trials of the engine worker `args[0]` sent on the socket `args[1]`."""
    die_with_parent()
    module, address = args
    build: harness.Build = importlib.import_module(module).SESSION
    torch_as_imported = torch_patches.note()  # imports torch._dynamo, so before the freeze
    gc.freeze()  # the imports' objects stay: the collection after each trial skips them
    imported = time.time()
    rank = int(os.environ.get("RANK", "0"))
    conn = Client(address, family="AF_UNIX")
    conn.send_bytes(json.dumps({"rank": rank}).encode())
    first, light = True, 0
    while (request := json.loads(conn.recv_bytes())).get("folder"):
        received = time.time()
        clock = {
            "launched": request["launched"],
            "started": started if first else received,
            "imported": imported if first else received,
        }
        device = _trial(
            build,
            Path(request["folder"]),
            request["log"],
            request["env"],
            rank,
            clock,
            torch_as_imported,
        )
        conn.send_bytes(b'{"done": true}')
        thorough = light >= MAX_LIGHT or not conn.poll(NEXT_TRIAL_WAIT_S)
        _release_memory(device, thorough)
        first, light = False, 0 if thorough else light + 1
    _close(conn)


def _trial(
    build: harness.Build,
    folder: Path,
    log: str,
    env: dict[str, str],
    rank: int,
    clock: dict[str, float],
    torch_as_imported: list[torch_patches.Namespace],
) -> torch.device:
    """One trial, answered once every rank is done with it."""
    spec = TrialSpec.from_json((folder / TRIAL_FILE).read_text())
    device = _device(spec)
    os.chdir(folder)  # as a one-trial launch runs: whatever the engine writes lands there
    with harness.output_to(log), _environment(env):
        reset_peak_memory(device)
        try:
            harness.settle_build_locks(folder, rank)
            result = harness.run_trial(build, spec, folder, rank, clock)
        except BaseException:
            traceback.print_exc()
            harness.exit_now(1)  # the pool goes down with the trial; torchrun stops the rest
        if rank == 0:
            result.write(folder)
        dist.barrier()
        live = destroy_trial_groups()
        print(f"autotune pool: rank {rank} holds {live} process group(s) after the trial")
        restored = torch_patches.put_back(torch_as_imported)
        print(f"autotune pool: rank {rank} put back {' '.join(restored) or 'nothing'} in torch")
    return device


def destroy_trial_groups() -> int:
    """Destroy every process group the trial made, the pool's world alone kept (on NCCL each
    holds device memory outside PyTorch's peak statistics, so a late trial would run out of
    memory where a fresh launch would not); how many groups live now. Every rank destroys
    them in the same order, as torch shuts groups down, for NCCL versions whose abort is
    collective. torch lists live groups only in its private `_world`."""
    live = distributed_c10d._world.pg_names
    for group in sorted(live, key=live.__getitem__, reverse=True):
        if group is not dist.group.WORLD:
            dist.destroy_process_group(group)
    return len(distributed_c10d._world.pg_map)


def _device(spec: TrialSpec) -> torch.device:
    if spec.cluster.backend == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


NEXT_TRIAL_WAIT_S = 0.05
"""How long a rank waits for the next trial before it collects thoroughly."""
MAX_LIGHT = 3
"""Light collections in a row at most: trials sent back to back still get a thorough one,
so what an engine let go of late is not kept for the pool's life."""


def _release_memory(device: torch.device, thorough: bool) -> None:
    """Give back what the trial's engine held, so the next trial's peak starts low. What
    survives is frozen, so the collections during the next trial's initialisation skip it
    (DeepSpeed ZeRO-3's initialisation is quicker by far for it). A thorough collection
    walks the frozen objects too (an engine's module globals may have let go of an earlier
    trial's state only now); it costs what a short trial would notice, so a rank makes it
    while the tuner takes in the result, and only a collection of the trial's own objects
    when the next trial is already waiting (trials sent back to back)."""
    if thorough:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """The trial's own variables (a test's injected fault) for the trial only."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _close(conn: Connection) -> None:
    conn.close()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    harness.exit_now()
