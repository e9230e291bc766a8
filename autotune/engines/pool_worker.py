"""A warm pool's rank: imports, the world process group and the device context paid once,
then trial after trial, each building its engine afresh.

torchrun starts `python -m autotune.engines.pool_worker <engine worker module> <socket>` on
every rank (launchers/warm_pool.py). Each rank connects to the launcher's socket and waits
for a trial folder; it runs the trial with the harness of `worker.py` (the same code a
one-trial launch runs), its output appended to the trial's log, and answers when every rank
is done. A trial that fails writes its `error-rank<N>.json` and ends the rank, which takes the
pool down: the next trial starts a fresh one, so no trial runs in a process a failure left.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the heavy imports, so the pool's first trial shows them

import contextlib  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from multiprocessing.connection import Client, Connection  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from autotune.engines import worker  # noqa: E402
from autotune.engines.measure import reset_peak_memory  # noqa: E402
from autotune.trial.lifetime import die_with_parent  # noqa: E402
from autotune.trial.spec import TRIAL_FILE, TrialSpec  # noqa: E402


def main() -> None:
    die_with_parent()
    worker.clear_stale_build_locks()
    module, address = sys.argv[1], sys.argv[2]
    build: worker.Build = importlib.import_module(module).SESSION
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
            "started": STARTED if first else received,
            "imported": imported if first else received,
        }
        device = _trial(
            build, Path(request["folder"]), request["log"], request["env"], rank, clock
        )
        conn.send_bytes(b'{"done": true}')
        thorough = light >= MAX_LIGHT or not conn.poll(NEXT_TRIAL_WAIT_S)
        _release_memory(device, thorough)
        first, light = False, 0 if thorough else light + 1
    _close(conn)


def _trial(
    build: worker.Build,
    folder: Path,
    log: str,
    env: dict[str, str],
    rank: int,
    clock: dict[str, float],
) -> torch.device:
    """One trial, answered once every rank is done with it."""
    spec = TrialSpec.from_json((folder / TRIAL_FILE).read_text())
    device = _device(spec)
    os.chdir(folder)  # as a one-trial launch runs: whatever the engine writes lands there
    with worker.output_to(log), _environment(env):
        reset_peak_memory(device)
        try:
            result = worker.run_trial(build, spec, folder, rank, clock)
        except BaseException:
            traceback.print_exc()
            worker.exit_now(1)  # the pool goes down with the trial; torchrun stops the other ranks
        if rank == 0:
            result.write(folder)
        dist.barrier()
    return device


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
    (DeepSpeed ZeRO-3 initialises in 0.08 s instead of 0.2 s here). A thorough collection
    walks the frozen objects too (an engine's module globals may have let go of an earlier
    trial's state only now); it takes about 0.3 s, so a rank makes it while the tuner takes in
    the result, and only a collection of the trial's own objects when the next trial is
    already waiting (trials sent back to back)."""
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
    worker.exit_now()


if __name__ == "__main__":
    main()
