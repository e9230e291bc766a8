"""A one-host run's stores listen on loopback, not on every interface.

torch's TCPStore takes a host only to connect to: its server listens on every address.
Here a server store on a loopback host is made from a socket bound to 127.0.0.1, handed to
it as `master_listen_fd`. `python -m autotune.rank.loopback ARGS` is torchrun with its
stores made so (the rendezvous store and the store its ranks share); with
`--local-addr 127.0.0.1` its ranks get MASTER_ADDR 127.0.0.1. A forked pool's trial makes
a store of its own in its rank 0, made so too (`bind_stores`).
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = (LOOPBACK, "localhost")
STORE_ARGS = (
    "world_size",
    "is_master",
    "timeout",
    "wait_for_workers",
    "multi_tenant",
    "master_listen_fd",
    "use_libuv",
)
"""TCPStore's parameters after host and port, in order."""


def loopback_store(host_name: str, port: int, *args: Any, **kwargs: Any) -> dist.TCPStore:
    """A TCPStore as torch makes it; a server on a loopback host listens on loopback only."""
    named = {**dict(zip(STORE_ARGS, args, strict=False)), **kwargs}
    if (
        host_name in LOOPBACK_NAMES
        and named.get("is_master")
        and not named.get("master_listen_fd")
    ):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, port))
        listener.listen(socket.SOMAXCONN)
        host_name, port = LOOPBACK, listener.getsockname()[1]
        named["master_listen_fd"] = listener.detach()  # the store's from now on
    return dist.TCPStore(host_name, port, **named)


def _shared_store(_handler: Any, master_addr: str, master_port: int) -> dist.TCPStore:
    """DynamicRendezvousHandler's store its ranks share, made as torch makes it."""
    return loopback_store(master_addr, master_port, is_master=True, multi_tenant=True)


def bind_stores() -> None:
    """Every TCPStore torch makes from here on through a rendezvous, `loopback_store`."""
    patches: tuple[tuple[Any, str, Callable[..., dist.TCPStore]], ...] = (
        # init_process_group's (the module: torch.distributed's function of its name hides it)
        (importlib.import_module("torch.distributed.rendezvous"), "TCPStore", loopback_store),
        (c10d_rendezvous_backend, "TCPStore", loopback_store),  # torchrun's rendezvous
        (DynamicRendezvousHandler, "_create_tcp_store_server", _shared_store),  # its ranks'
    )
    for owner, name, maker in patches:
        setattr(owner, name, maker)


def main() -> None:
    """torchrun, with its arguments, its stores on loopback."""
    from torch.distributed.run import main as torchrun

    bind_stores()
    torchrun()


if __name__ == "__main__":
    main()
