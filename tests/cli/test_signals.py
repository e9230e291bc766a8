"""A tuner started in the background by a script inherits SIGINT ignored; it takes Ctrl-C
back."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from autotune.cli.app import restore_sigint


@pytest.fixture
def sigint_kept() -> Iterator[None]:
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("sigint_kept")
def test_an_ignored_sigint_is_restored_to_the_default_handler() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    restore_sigint()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.usefixtures("sigint_kept")
def test_a_sigint_handler_set_on_purpose_is_kept() -> None:
    def mine(signum: int, frame: object) -> None:
        return None

    signal.signal(signal.SIGINT, mine)
    restore_sigint()
    assert signal.getsignal(signal.SIGINT) is mine
