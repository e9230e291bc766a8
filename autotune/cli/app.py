"""The `autotune` group and its entry point: errors become one line, input errors exit 2."""

from __future__ import annotations

import signal
import sys
import warnings
from typing import Any

import click

from autotune.errors import AutotuneError, InputError


def _quiet_optuna() -> None:
    """autotune prints its own progress: Optuna's info log is noise here, as are its
    experimental-feature notices. The warnings autotune's own calls would raise are silenced
    where it makes them (study.loop, study.record.storage, report.html), not here."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="autotune")
def cli() -> None:
    """Find the fastest way to run a training job on a cluster."""


def _interrupt_on_signals() -> None:
    """SIGTERM and SIGHUP (a closed terminal) stop the tuner like Ctrl-C: the running trial is
    stopped and recorded as interrupted. A second signal while that is under way is ignored,
    so the cleanup it would cut short (the trial's processes, a pool's folder) finishes."""
    stopping = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, handler)


def restore_sigint() -> None:
    """Ctrl-C (SIGINT) stops the tuner even where it was started in the background by a
    script, which starts it with SIGINT ignored: the default handler is put back then (a
    handler someone set on purpose is kept)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> None:
    restore_sigint()
    _interrupt_on_signals()
    _quiet_optuna()
    try:
        cli.main(standalone_mode=False)
    except AutotuneError as exc:  # input errors exit 2, what failed at run time 1
        click.echo(f"autotune: error: {exc}", err=True)
        sys.exit(2 if isinstance(exc, InputError) else 1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"autotune: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("autotune: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # the storage or the disk failing under a run: one line
        from autotune.cli.failures import runtime_failure

        if (line := runtime_failure(exc)) is None:
            raise
        click.echo(f"autotune: error: {line}", err=True)
        sys.exit(1)
