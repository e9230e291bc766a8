"""One root exception and a few subclasses; `cli` turns them into one line and an exit code."""

import difflib
from collections.abc import Iterable


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose."""


class InputError(AutotuneError):
    """Bad input from a file or a flag: the user must fix it (exit code 2)."""


class LaunchError(AutotuneError):
    """Something autotune ran failed at run time (a benchmark launch): not the user's input
    (exit code 1, with its cause)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """ "; did you mean X?" for the choice closest to a mistyped `word` (case aside), else
    ""."""
    names = list(choices)
    lowered = {name.lower(): name for name in names}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f"; did you mean {lowered[close[0]]}?" if close else ""
