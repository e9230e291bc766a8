"""The live view of a study: optuna-dashboard on its storage, served to loopback unless the
user asks for more (each trial's note there is the study's, `study/record/dashboard_note.py`)."""

from __future__ import annotations

import ipaddress
import socket

from autotune.errors import InputError


def check_host(host: str, expose: bool) -> None:
    """optuna-dashboard has no authentication: anything beyond loopback must be asked for."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        raise InputError(f"--host {host!r}: no such address") from None
    remote = [a for a in addresses if not ipaddress.ip_address(str(a).split("%")[0]).is_loopback]
    if remote and not expose:
        raise InputError(
            f"--host {host} would serve the study to the network without authentication; "
            "add --expose to mean it"
        )


def check_port_free(host: str, port: int) -> None:
    """Refuse in one line a port something already listens on (the server would end in a
    traceback once the study is loaded)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise InputError(
                f"--port {port}: cannot serve on {host}: {exc.strerror or exc} (give another "
                "--port)"
            ) from None
