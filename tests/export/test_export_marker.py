"""`export --force` replaces only a folder autotune exported, and only a plain folder path is
an output; `report --out` only a plain file's path."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest

from autotune.errors import InputError
from autotune.export.best import MARKER, export_best
from autotune.problem import load_problem
from autotune.report.html import write_report
from autotune.space import TrainConfig
from autotune.study.record.storage import problem_attrs
from tests.fakes import measured_study, units_study


def exported_study() -> optuna.Study:
    study = measured_study((TrainConfig(dp=2), 100.0))
    for key, value in problem_attrs(load_problem("deepspeed", "tiny", "local:2")).items():
        study.set_user_attr(key, value)
    return study


def test_an_export_is_marked_and_force_replaces_it_with_what_a_user_added(
    tmp_path: Path,
) -> None:
    study, out = exported_study(), tmp_path / "best"
    names = {p.name for p in export_best(study, out)}
    assert (out / MARKER).read_text() == f"{study.study_name}\n" and MARKER not in names
    (out / "notes.txt").write_text("mine, in autotune's export")
    with pytest.raises(InputError, match="not empty"):
        export_best(study, out)
    export_best(study, out, force=True)
    assert not (out / "notes.txt").exists() and (out / MARKER).is_file()


def test_force_never_replaces_a_folder_autotune_did_not_export(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match=f"{out} was not exported by autotune") as refused:
        export_best(exported_study(), out, force=True)
    assert "\n" not in str(refused.value)
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no staging folder left
    assert (out / "keep.txt").read_text() == "mine"


def test_an_output_that_is_not_a_plain_folder_path_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "real"
    folder.mkdir()
    link = tmp_path / "link"
    link.symlink_to(folder)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for out, why in ((link, "symbolic link"), (fifo, "not a folder")):
        with pytest.raises(InputError, match=why):
            export_best(exported_study(), out, force=True)
    assert list(folder.iterdir()) == [] and fifo.exists() and link.is_symlink()
    with pytest.raises(InputError, match="not a folder"):
        export_best(exported_study(), Path("/dev/null"), force=True)


def test_a_report_on_a_fifo_or_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "report.html"
    os.mkfifo(fifo)
    link = tmp_path / "link.html"
    link.symlink_to(tmp_path / "elsewhere.html")
    with pytest.raises(InputError, match="not a plain file"):
        write_report(units_study(), fifo)
    with pytest.raises(InputError, match="symbolic link"):
        write_report(units_study(), link)
    assert not (tmp_path / "elsewhere.html").exists()
