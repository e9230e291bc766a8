"""`autotune dashboard`: optuna-dashboard served on a study's storage."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli.app import cli
from autotune.cli.options import console, study_options
from autotune.errors import InputError


@cli.command()
@study_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on.")
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Port to serve on.",
)
@click.option(
    "--expose",
    is_flag=True,
    help="Allow a --host beyond loopback (optuna-dashboard has no authentication).",
)
def dashboard(
    study_name: str, storage: str | None, results: Path, host: str, port: int, expose: bool
) -> None:
    """Serve optuna-dashboard on the study's storage until Ctrl-C."""
    import optuna_dashboard

    from autotune.report.dashboard import check_host, check_port_free
    from autotune.study import load_existing_study
    from autotune.study.record.optuna_private import storage_of, study_id_of
    from autotune.study.record.storage import study_ref

    check_host(host, expose)
    ref = study_ref(study_name, storage, results)
    study = load_existing_study(ref)
    study_id = study_id_of(study)
    check_port_free(host, port)
    console.print(f"dashboard: http://{host}:{port}/dashboard/studies/{study_id}  (Ctrl-C stops)")
    try:
        optuna_dashboard.run_server(storage_of(study), host=host, port=port)
    except OSError as exc:  # taken between the check and the server's bind
        raise InputError(f"--port {port}: cannot serve on {host}: {exc.strerror or exc}") from None
