"""One root exception and a few subclasses; `cli` turns them into one line and an exit code."""


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose."""


class InputError(AutotuneError):
    """Bad input from a file or a flag: the user must fix it (exit code 2)."""


class LaunchError(AutotuneError):
    """Something autotune ran failed at run time (a benchmark launch): not the user's input
    (exit code 1, with its cause)."""
