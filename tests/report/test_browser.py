"""The report and the live dashboard of a finished tiny study, opened in headless Chromium:
every trial is on the page, the plots are drawn, and the browser logs no errors."""

from __future__ import annotations

import re
import shutil
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, autotune, spawn_autotune

pytestmark = pytest.mark.slow
SHOTS = REPO / "results" / "browser"
SCIENTIFIC = re.compile(r"\d\.\d+e[+-]?\d+")
RAW_COUNT = re.compile(r"\b\d{7,}\b")
"""A byte count or bucket size written out in digits, where a person should read MiB or 50M."""
TRIALS = 3


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh installs it as root)")
    return path


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("browser")
    done = autotune(
        "run", "--engine", "torch", "--cluster", "local:1", "--trials", str(TRIALS),
        "--sampler", "grid",
        "--no-confirm", "--no-early-stop", "--measured-steps", "3", "--study", "b",
        "--results", str(results),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return results


@pytest.fixture
def browser_page(chromium: str) -> Iterator[tuple[object, list[str]]]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        yield page, errors
        browser.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drawn_plots(page: object) -> int:
    """Plotly figures whose SVG holds at least one drawn trace."""
    return page.locator(".js-plotly-plot:has(svg.main-svg .trace)").count()  # type: ignore[attr-defined]


def test_report_shows_every_trial_and_draws_its_plots(study: Path, browser_page) -> None:  # type: ignore[no-untyped-def]
    page, errors = browser_page
    page.goto((study / "b" / "report.html").as_uri())
    page.wait_for_selector(".js-plotly-plot svg.main-svg")
    table = page.locator("table").first
    numbers = table.locator("tr td:first-child").all_inner_texts()
    assert sorted(numbers) == [str(n) for n in range(TRIALS)]
    heights = [row.bounding_box()["height"] for row in table.locator("tbody tr").all()]
    assert max(heights) < 1.5 * min(heights)  # one line per trial
    text = table.inner_text()
    assert not SCIENTIFIC.search(text) and not RAW_COUNT.search(text), text
    assert "MiB" in text or "GiB" in text  # memory in human units
    assert drawn_plots(page) >= 5
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "report.png"), full_page=True)
    assert errors == []


def test_live_dashboard_shows_every_trial_with_its_note(study: Path, browser_page) -> None:  # type: ignore[no-untyped-def]
    page, errors = browser_page
    port = free_port()
    server = spawn_autotune(
        "dashboard", "--study", "b", "--results", str(study), "--port", str(port)
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{url}/api/studies", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        page.goto(f"{url}/dashboard/studies/1")
        page.wait_for_selector(".js-plotly-plot svg.main-svg .trace", timeout=30_000)
        assert drawn_plots(page) >= 1
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "dashboard.png"), full_page=True)
        page.goto(f"{url}/dashboard/studies/1/trials")
        page.wait_for_selector("text=Trial 0")
        body = page.inner_text("body")
        assert all(f"Trial {n}" in body for n in range(TRIALS))
        assert "measured" in body and "predicted" in body  # the first trial's note
        page.screenshot(path=str(SHOTS / "dashboard_trials.png"), full_page=True)
        assert errors == []
    finally:
        server.terminate()
        server.wait(timeout=30)
