"""The live view of a study: optuna-dashboard on its storage, and the markdown note each trial
carries there (config, measured and predicted breakdowns, the error line of a failure)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from autotune.errors import InputError
from autotune.space import TrainConfig
from autotune.trial.result import TrialResult

GIB = 2**30


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


def _row(name: str, measured: str, predicted: str) -> str:
    return f"| {name} | {measured} | {predicted} |"


def _seconds(value: Any) -> str:
    return f"{value * 1e3:.1f} ms" if isinstance(value, int | float) else "-"


def _gib(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / 2**20:.1f} MiB"


def trial_note(
    config: TrainConfig,
    kind: str,
    source: str,
    error: str | None,
    result: TrialResult | None,
    predicted: dict[str, Any] | None,
) -> str:
    """Markdown for optuna-dashboard's trial note."""
    predicted = predicted or {}
    profile = (result.profile if result else None) or {}
    step = predicted.get("step") or {}
    lines = [
        f"**{kind}** ({source}) `{config.label()}`",
        "",
        "| | measured | predicted |",
        "|---|---|---|",
        _row(
            "step time",
            _seconds(result.step_time_s if result else None),
            _seconds(step.get("total_s")),
        ),
        _row("compute", _seconds(profile.get("compute_s")), _seconds(step.get("compute_s"))),
        _row(
            "communication",
            _seconds(profile.get("comm_s")),
            _seconds(
                sum(
                    step.get(k, 0.0)
                    for k in ("tp_comm_s", "pp_p2p_s", "cp_comm_s", "ep_comm_s", "dp_exposed_s")
                )
                if step
                else None
            ),
        ),
        _row("pipeline bubble", "-", _seconds(step.get("pp_bubble_s"))),
        _row(
            "peak memory",
            _gib(result.peak_memory_bytes if result else None),
            _gib(predicted.get("memory_bytes")),
        ),
        _row("model states", _gib(result.model_state_bytes if result else None), "-"),
    ]
    if error:
        lines += ["", "```", error, "```"]
    return "\n".join(lines) + "\n"
