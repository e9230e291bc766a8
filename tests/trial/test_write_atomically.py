"""Files the tuner and its workers share are written whole or not at all, and a failed
write leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.trial.spec import write_atomically


def test_a_write_replaces_the_file_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "outcome.json"
    target.write_text("old")
    write_atomically(target, "new ✓\n")
    assert target.read_text(encoding="utf-8") == "new ✓\n"
    assert [p.name for p in tmp_path.iterdir()] == ["outcome.json"]


def test_a_failed_rename_leaves_no_temporary_file_and_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(self: Path, target: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(tmp_path / "result.json", "{}\n")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_no_temporary_file_and_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("autotune.trial.spec.os.fsync", fail)
    with pytest.raises(OSError, match="Input/output error"):
        write_atomically(tmp_path / "result.json", "{}\n")
    assert list(tmp_path.iterdir()) == []
