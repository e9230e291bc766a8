"""Workers of one study export the same winner at the same moment when they finish together:
each export must leave a whole folder, and none may fail."""

from __future__ import annotations

import multiprocessing
import tempfile
from pathlib import Path

from autotune.export.best import replace_folder

FILES = ("train.sh", "trial.json", "best.yaml", "nccl.env")


def _export_repeatedly(out: str, writer: int) -> None:
    target = Path(out)
    for n in range(12):
        staging = Path(tempfile.mkdtemp(prefix=".best-", dir=target.parent))
        for name in FILES:
            (staging / name).write_text(f"{writer} {n}\n")
        replace_folder(staging, target)


def test_exports_racing_for_one_folder_all_succeed_and_leave_one_whole_export(
    tmp_path: Path,
) -> None:
    out = tmp_path / "best"
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_export_repeatedly, args=(str(out), w)) for w in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=120)
    assert [w.exitcode for w in writers] == [0, 0, 0, 0]
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    contents = {(out / name).read_text() for name in FILES}
    assert len(contents) == 1, f"files from different exports were mixed: {contents}"
    assert [p.name for p in tmp_path.iterdir()] == ["best"], "staging folders were left behind"


def test_what_a_killed_export_left_is_removed_by_the_next_and_a_live_ones_is_not(
    tmp_path: Path,
) -> None:
    """SIGKILL during an export (no cleanup runs) once left a hidden `.best-XXXX` for good."""
    import os

    from autotune.export.best import remove_stale_staging

    dead = tmp_path / ".best-999999999-abc"  # no such process
    live = tmp_path / f".best-{os.getpid()}-def"  # this one's: another worker's at work
    for folder in (dead, live):
        folder.mkdir()
        (folder / "train.sh").write_text("x\n")
    remove_stale_staging(tmp_path / "best")
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name]
