"""A trial's log stays within a set size on disk, head and tail kept with a note of what was
cut, and the tuner reads it in bounded pieces: a command printing 500 MB a rank once made
1 GB logs a trial and took the tuner to 2.3 GB of memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.launchers import log_limit
from autotune.launchers.base import LOG_FILE
from tests.conftest import autotune


def test_a_log_past_its_limit_keeps_its_head_its_tail_and_says_what_was_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_limit, "HEAD_BYTES", 100)
    monkeypatch.setattr(log_limit, "TAIL_BYTES", 100)
    monkeypatch.setattr(log_limit, "LIMIT_BYTES", 400)
    log = tmp_path / "trial.log"
    written = 0
    with log.open("ab") as out:  # as a rank writes it: appending, while it is cut
        for i in range(200):
            line = f"step {i:04d} loss 6.0\n".encode()
            out.write(line)
            out.flush()
            written += len(line)
            log_limit.bound(log)
    text = log.read_text()
    assert log.stat().st_size <= 400
    assert text.startswith("step 0000 loss 6.0\n")
    assert text.endswith("step 0199 loss 6.0\n")
    note = text[text.index("\n[autotune: ") : text.index("kept]\n") + len("kept]\n")]
    cut = int(note.split("[autotune: ")[1].split(" bytes")[0].replace(",", ""))
    assert cut + len(text) - len(note) == written  # every byte is either kept or counted


def test_a_long_log_is_read_in_bounded_pieces(tmp_path: Path) -> None:
    log = tmp_path / "trial.log"
    log.write_bytes(b"first line\n" + b"x" * (5 * log_limit.READ_BYTES) + b"\nlast line\n")
    text = log_limit.read_bounded(log)
    assert len(text) < 3 * log_limit.READ_BYTES
    assert text.startswith("first line") and text.endswith("last line\n")


FLOOD = """
import sys
import torch.distributed as dist
from autotune import step

dist.init_process_group("gloo")
line = "x" * 1023 + "\\n"
for i in range(40):
    sys.stdout.write(line * 4096)  # 4 MiB a step a rank
    step.done(loss=1.0)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_command_that_floods_its_log_leaves_a_bounded_log(tmp_path: Path) -> None:
    (tmp_path / "flood.py").write_text(FLOOD)
    (tmp_path / "space.yaml").write_text("engine: torch\nknobs:\n  mbs: [1, 2]\n")
    done = autotune(
        "run", "--engine", "torch", "--space", "space.yaml", "--cluster", "local:2",
        "--trials", "1", "--no-confirm", "--results", "res", "--study", "s",
        "--users-config", "mbs=1", "--", "flood.py",
        cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    logs = list((tmp_path / "res" / "s" / "trials").rglob(LOG_FILE))
    assert logs and all(p.stat().st_size <= log_limit.LIMIT_BYTES for p in logs)
    assert any(b"bytes of this log cut here" in p.read_bytes() for p in logs)
