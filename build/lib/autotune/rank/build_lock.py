"""Where an engine's compiled ops live, and the build lock a killed build leaves behind.

DeepSpeed compiles its ops with torch's `cpp_extension`, into `$TORCH_EXTENSIONS_DIR/<op>/`
(unset: `~/.cache/torch_extensions/<python>_<accelerator>/<op>/`, one folder every install
of the user shares). Each install keeps its own, `torch_extensions/` in its prefix (the
virtual environment), built there once by scripts/setup.sh; every rank sets it before any
engine is imported (`autotune.rank`), so trials load the install's ops and never compile,
and two installs never collide.

A build holds torch's `FileBaton`, the file `<op>/lock`, open from the moment it creates it
until it removes it. A build that was killed leaves the file, and every later load waits on
it for ever without a word. A lock no process holds open is removed; one whose holder
cannot be seen (no /proc, or another user's file) is waited on for a minute, then the trial
fails with one line naming it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

EXTENSIONS_ENV = "TORCH_EXTENSIONS_DIR"
WAIT_S = 60.0
"""How long a lock whose holder cannot be seen is waited on before the trial fails."""
POLL_S = 0.5


class BuildLockError(RuntimeError):
    """An op build's lock that may be stale and blocks every load of that op."""


def install_folder() -> Path | None:
    """This install's own folder for compiled ops, in its prefix; None where the prefix
    cannot hold it (torch's shared default then)."""
    folder = Path(sys.prefix) / "torch_extensions"
    if folder.is_dir() or os.access(sys.prefix, os.W_OK):
        return folder
    return None


def use_install_folder() -> None:
    """Ops from this install's folder, unless TORCH_EXTENSIONS_DIR already names one."""
    folder = install_folder()
    if folder is not None:
        os.environ.setdefault(EXTENSIONS_ENV, str(folder))


def build_locks() -> list[Path]:
    """Every op's lock now: `<root>/<op>/lock`, the root one level deeper where torch's
    default (per Python and accelerator) is in use."""
    if root := os.environ.get(EXTENSIONS_ENV):
        return sorted(Path(root).glob("*/lock"))
    return sorted((Path.home() / ".cache" / "torch_extensions").glob("*/*/lock"))


def holders(lock: Path) -> list[int] | None:
    """The processes that hold `lock` open; None where that cannot be known (no /proc, or
    a lock of another user that this process cannot see all holders of)."""
    proc = Path("/proc")
    try:
        if not (proc / "self" / "fd").is_dir():
            return None
        if lock.stat().st_uid != os.geteuid() and os.geteuid() != 0:
            return None
    except OSError:
        return []  # gone meanwhile
    target = str(lock.resolve())
    found = []
    for pid in (p for p in proc.iterdir() if p.name.isdigit()):
        try:
            if any(os.readlink(fd) == target for fd in (pid / "fd").iterdir()):
                found.append(int(pid.name))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def clear_stale() -> list[Path]:
    """Remove every lock no process holds; the locks left (held, or not knowably free)."""
    left = []
    for lock in build_locks():
        if holders(lock) == []:
            try:
                lock.unlink()
            except FileNotFoundError:
                continue
            except OSError:
                left.append(lock)
                continue
            print(f"autotune: removed {lock}, a build lock no process held", file=sys.stderr)
        else:
            left.append(lock)
    return left


def settle(wait_s: float = WAIT_S) -> None:
    """Clear stale locks; a lock held by a running build is left to it (the trial's time
    limit bounds the wait); one that cannot be known free, or removed, gets `wait_s` to go,
    then BuildLockError."""
    deadline = time.monotonic() + wait_s
    while blocking := [lock for lock in clear_stale() if not holders(lock)]:
        if time.monotonic() >= deadline:
            lock = blocking[0]
            raise BuildLockError(
                f"{lock} has blocked compiled-op loads for {wait_s:.0f} s and its holder "
                f"cannot be seen: if no build is running, remove it (rm {lock})"
            )
        time.sleep(POLL_S)
