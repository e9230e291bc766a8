"""The HTML report as a person reads it: its table, hover texts and axes in human units,
configs as users write them, importances only of the knobs that varied."""

from __future__ import annotations

import html
import re
import warnings
from pathlib import Path

from autotune.report import html as report
from autotune.report.table import trial_table
from tests.fakes import units_study

SCIENTIFIC = re.compile(r"\d\.\d+e[+-]?\d", re.IGNORECASE)


def page_of(tmp_path: Path) -> str:
    return report.write_report(units_study(), tmp_path / "report.html").read_text()


def test_the_reports_table_is_in_human_units(tmp_path: Path) -> None:
    page = page_of(tmp_path)
    table = page[page.index("<h2>All trials") : page.index("</table>")]
    shown = html.unescape(re.sub(r"<[^>]+>", " ", table))  # what the cells say
    assert not SCIENTIFIC.search(shown) and not re.search(r"\d{7,}", shown), shown
    for text in ("444.5 MiB", "47.7 GiB", "40,213", "12.3 ms", "50M", "500M"):
        assert f" {text} " in shown


def test_hovers_and_axes_say_configs_as_users_write_them(tmp_path: Path) -> None:
    page = page_of(tmp_path).split("<h2>All trials")[0].replace("\\u002f", "/")  # JSON's
    assert "reduce_bucket=50000000" not in page and "dp=8,zero=2,mbs=4,reduce_bucket=50M" in page
    assert "%{y:,.0f} tok/s" in page and '"tickformat":","' in page
    assert "%{x:.1f} GiB" in page


def test_importances_only_of_knobs_that_varied_among_completed_trials() -> None:
    """tp holds one value and mbs varies only in a failed trial: neither explains anything.
    Four trials are too few for Optuna's quantiles, and no warning says so."""
    study = units_study()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure = report._importances(trial_table(study), study, "measured")
    assert figure is not None and set(figure.data[0].y) == {"zero", "reduce_bucket"}
    assert [str(w.message) for w in caught] == []


def test_a_report_replaces_its_own_earlier_report_and_nothing_else_unasked(
    tmp_path: Path,
) -> None:
    """`autotune report --out FILE` once replaced any file: a user's train.py, a dotfile, the
    study's own study.db."""
    import pytest

    from autotune.errors import InputError

    study = units_study(storage=f"sqlite:///{tmp_path / 'study.db'}")
    out = tmp_path / "r.html"
    report.write_report(study, out)
    report.write_report(study, out)  # its own earlier report: replaced
    mine = tmp_path / "train.py"
    mine.write_text("print('mine')\n")
    with pytest.raises(InputError, match="not an autotune report; --force"):
        report.write_report(study, mine)
    assert mine.read_text() == "print('mine')\n"
    with pytest.raises(InputError, match="the study's own storage"):
        report.write_report(study, tmp_path / "study.db", force=True)
    report.write_report(study, mine, force=True)
    assert report.is_report(mine)


def test_the_report_says_when_how_and_where_it_was_made_and_what_its_signs_mean(
    tmp_path: Path,
) -> None:
    """Its timestamp once had no time zone, and nothing said the command, versions or host,
    nor what a range and "stopped" mean."""
    out = report.write_report(units_study(), tmp_path / "r.html")
    text = html.unescape(out.read_text())
    made = re.search(r"Made (\S+) on (\S+) by `autotune[^`]*` \(Python [\d.]+, autotune ", text)
    assert made is not None, text[:2000]
    assert re.search(r"[+-]\d\d:\d\d$", made.group(1)), made.group(1)  # a time zone
    assert "A 95% range is where" in text and '"stopped" says why' in text
