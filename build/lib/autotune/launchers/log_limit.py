"""A trial's log kept to a set size on disk (its head, a line saying how much was cut, its
tail) while the launch writes it, and read back in bounded pieces: a command printing 500 MB
a rank once made 1 GB logs a trial, and the tuner that read them whole reached 2.3 GB.

Every writer of a log appends (O_APPEND: torchrun's redirect, a pool rank's `output_to`), so
cutting it to its head makes the next lines land right after the cut."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

HEAD_BYTES = 4 << 20
"""The start of a log, kept whole: the command, its first errors."""
TAIL_BYTES = 4 << 20
"""The end of a log, kept: the last steps, the error that ended it."""
LIMIT_BYTES = 32 << 20
"""The size past which a log is cut (checked while the launch runs and once it ended)."""
READ_BYTES = 1 << 20
"""How much of a log's head and of its tail the tuner reads to classify a failure."""
NOTE = "\n[autotune: {cut} bytes of this log cut here; its first and last bytes are kept]\n"
_CUT = re.compile(rb"\n\[autotune: ([\d,]+) bytes of this log cut here;[^\]\n]*\]\n")


def bound(path: Path) -> None:
    """Cut the log at `path` to its head and tail once it is past `LIMIT_BYTES`; nothing
    where it is shorter, or gone."""
    with contextlib.suppress(OSError), path.open("r+b") as f:
        size = f.seek(0, 2)
        if size <= LIMIT_BYTES:
            return
        f.seek(HEAD_BYTES)
        earlier = _CUT.match(f.read(256))
        cut = size - HEAD_BYTES - TAIL_BYTES
        if earlier:  # an earlier cut's note sits right after the head: it counts too
            cut += int(earlier.group(1).replace(b",", b"")) - len(earlier.group(0))
        f.seek(size - TAIL_BYTES)
        tail = f.read(TAIL_BYTES)
        f.truncate(HEAD_BYTES)
        f.seek(HEAD_BYTES)
        f.write(NOTE.format(cut=f"{cut:,}").encode() + tail)


def read_bounded(path: Path) -> str:
    """The log's text, or its first and last `READ_BYTES` where it is longer; "" when there
    is none."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(0)
            if size <= 2 * READ_BYTES:
                return f.read().decode(errors="replace")
            head = f.read(READ_BYTES)
            f.seek(size - READ_BYTES)
            tail = f.read(READ_BYTES)
    except OSError:
        return ""
    skipped = f"\n[... {size - 2 * READ_BYTES:,} bytes not read ...]\n"
    return head.decode(errors="replace") + skipped + tail.decode(errors="replace")
