"""DeepSpeed's CPU allreduce buffers leave /dev/shm as a rank ends."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from autotune.rank import shared_buffers

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")


def buffer(name: str) -> Path:
    path = Path(f"{shared_buffers.PREFIX}{os.getuid()}_127.0.0.1_{os.getpid()}_{name}")
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    return path


def test_a_buffer_this_rank_maps_is_unlinked_and_stays_usable() -> None:
    """The name goes, the memory stays mapped for whoever maps it; a buffer this process
    does not map (another world's, running now) is left alone."""
    mapped, other = buffer("0"), buffer("1")
    try:
        with mapped.open("r+b") as f, mmap.mmap(f.fileno(), mmap.PAGESIZE) as memory:
            assert shared_buffers.release() == [str(mapped)]
            assert not mapped.exists() and other.exists()
            memory[:5] = b"still"
            assert memory[:5] == b"still"
            assert shared_buffers.release() == []  # mapped but deleted: nothing to do
    finally:
        mapped.unlink(missing_ok=True)
        other.unlink(missing_ok=True)
