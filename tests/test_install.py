"""Installing as users install: the wheel into a bare environment, and the install page's
version table against what CI tests with."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.paths import REPO as ROOT

INSTALL_PAGE = ROOT / "docs" / "install.md"


def _tested_in_ci() -> dict[str, str]:
    """The install page's supported-versions table: package -> the version CI tests."""
    table = INSTALL_PAGE.read_text().partition("## Supported versions")[2]
    rows = re.findall(r"^\| ([\w.-]+) \| [^|]+ \| ([\w.]+) \|$", table, flags=re.M)
    return dict(rows)


def test_the_install_pages_versions_are_those_ci_tests() -> None:
    tested = _tested_in_ci()
    assert tested.pop("Python") == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert {"torch", "deepspeed", "megatron-core", "transformers", "torchtitan"} <= set(tested)
    for package, shown in tested.items():
        assert version(package).split("+")[0] == shown, package


def _run(*args: str | Path, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_the_wheel_installs_into_a_bare_environment_and_plans(tmp_path: Path) -> None:
    """`pip install` of the built wheel into a new environment with nothing else: it plans
    and simulates without torch, and a real run says in one line which extra it needs."""
    built = _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", ROOT, "-w", "dist", cwd=tmp_path
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("autotune-*.whl")
    made = _run(sys.executable, "-m", "venv", "bare", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    bare = tmp_path / "bare" / "bin"
    installed = _run(bare / "pip", "install", "--quiet", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert _run(bare / "python", "-c", "import torch", cwd=tmp_path).returncode != 0

    planned = _run(
        bare / "autotune", "plan", "--engine", "megatron", "--model", "llama3-70b",
        "--cluster", "dgx-h100:2", "--top", "3", cwd=tmp_path,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert "best predicted first" in planned.stdout
    simulated = _run(
        bare / "autotune", "run", "--launcher", "simulate", "--trials", "3", cwd=tmp_path
    )
    assert simulated.returncode == 0, simulated.stderr[-2000:]
    assert (tmp_path / "results" / "tiny-local-deepspeed-simulated" / "best" / "train.sh").exists()
    real = _run(bare / "autotune", "run", "--trials", "1", cwd=tmp_path)
    assert real.returncode == 2
    assert real.stderr.strip().count("\n") == 0 and "autotune[deepspeed]" in real.stderr


def test_an_engine_whose_framework_is_missing_names_the_extra_that_installs_it() -> None:
    from autotune.engines.torch.engine import TorchEngine
    from autotune.errors import InputError
    from autotune.specs.loading import load_cluster

    class Elsewhere(TorchEngine):
        needs = ("torch", "a_framework_not_installed")

    with pytest.raises(InputError, match=r"a_framework_not_installed.*autotune\[torch\]"):
        Elsewhere().check_runnable(load_cluster("local:2"))
    TorchEngine().check_runnable(load_cluster("local:2"))  # torch is here
