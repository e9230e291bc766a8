"""The parity benchmark's smoke run: one short study of a broken script, judged as the
benchmark judges them (its report is regenerated outside CI)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.paths import REPO


@pytest.mark.slow
def test_the_parity_benchmark_runs_one_study_and_judges_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.parity", "--smoke"],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    judged = json.loads(done.stdout.strip().splitlines()[-1])
    assert judged["caught"] and not judged["exported_moved"] and judged["named"]
