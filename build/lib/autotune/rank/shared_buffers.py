"""DeepSpeed's CPU allreduce buffers, unlinked as a rank ends.

On CPU, where every rank is on one node (LOCAL_SIZE, which DeepSpeed's own launcher sets, is
the world size), DeepSpeed's communication backend (`ops/csrc/cpu/comm/shm.cpp`) gives each
rank a shared-memory buffer, `deepspeed_allreduce_buffer_<uid>_<address>_<port>_<rank>`
(about 66 MB), that every peer maps, and never unlinks it. Each trial is a new world on a
new port, so every trial would leave one per rank in /dev/shm, which is memory, until the
machine has none left and the kernel kills what runs (a study among them). The peers map
each other's buffers as the world forms, before any step, so a rank that ends can take the
names away: the memory is freed once the last process that maps it is gone. Importing this
module imports nothing heavy (a rank's entry imports it before its clock starts).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PREFIX = "/dev/shm/deepspeed_allreduce_buffer_"
MAPS = Path("/proc/self/maps")


def release(maps: Path = MAPS) -> list[str]:
    """Unlink every DeepSpeed allreduce buffer this process maps (its own and its peers': a
    peer killed before it could unlink its own leaves it to the survivors); the paths
    unlinked. Nothing where the process maps none, or on a system without /proc."""
    try:
        lines = maps.read_text().splitlines()
    except OSError:
        return []
    paths = {
        fields[5]
        for line in lines
        if len(fields := line.split(maxsplit=5)) == 6 and fields[5].startswith(PREFIX)
    }
    released = []
    for path in sorted(paths):
        if path.endswith(" (deleted)"):
            continue  # another rank took the name already
        with contextlib.suppress(OSError):
            os.unlink(path)
            released.append(path)
    return released
