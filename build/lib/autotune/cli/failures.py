"""What went wrong at run time outside autotune's own checks, in one line: the study's storage
lost (a database server stopped, a SQLite file deleted, truncated or on a full disk) or a full
or read-only disk under a file autotune writes. Once 32-164-line tracebacks whose last line
was Optuna's "exceeding max length"; a study keeps every trial told before, so running it
again resumes it."""

from __future__ import annotations

import errno

import optuna
import sqlalchemy.exc

RESUME = "run the same `autotune run` again to resume: every trial told before is kept"
DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES}
"""OSErrors of the disk, not of a path the user gave (those are input errors, checked first)."""


def runtime_failure(exc: BaseException) -> str | None:
    """The one line for `exc`, where it is the storage or the disk failing; None otherwise."""
    cause = _root(exc)
    if isinstance(cause, sqlalchemy.exc.SQLAlchemyError) or isinstance(
        exc, optuna.exceptions.StorageInternalError
    ):
        return f"the study's storage failed: {_storage_words(cause)}; {RESUME}"
    if isinstance(cause, OSError) and cause.errno in DISK_ERRORS:
        where = f" writing {cause.filename}" if cause.filename else ""
        return f"the disk failed{where}: {cause.strerror or cause}; {RESUME}"
    return None


def _root(exc: BaseException) -> BaseException:
    """The deepest cause of `exc` that says what happened (a driver's error under
    SQLAlchemy's, under Optuna's)."""
    seen = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        following = seen.__cause__ or seen.__context__
        assert following is not None
        if isinstance(following, sqlalchemy.exc.SQLAlchemyError | OSError):
            seen = following
            continue
        break
    return seen


def _storage_words(cause: BaseException) -> str:
    """A driver's error in one line, its password never shown (`storage.masked_url`)."""
    original = getattr(cause, "orig", None) or cause
    text = " ".join(str(original).split()) or type(original).__name__
    return text[:300]
