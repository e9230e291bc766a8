"""A launcher's own settings: a frozen dataclass read from the cluster file's section named
after the launcher (`slurm:`), then from the launcher's flags, each value checked by pydantic.

A flag replaces what the file says, but for a tuple (SLURM's `--sbatch-option`), whose values
add to the file's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from autotune.errors import InputError


@dataclass(frozen=True)
class LauncherOption:
    """One flag of a launcher's: `flag` sets `field` of its settings; `multiple`: it may be
    given again, each value added (a tuple field); `file`: it names a file (the shell
    completes it as one)."""

    flag: str
    field: str
    help: str
    multiple: bool = False
    file: bool = False

    def param(self, launcher: str) -> str:
        """The flag's name among a command's parameters (`slurm_partition`)."""
        return f"{launcher}_{self.field}"


def read_settings(
    settings_type: type[Any],
    launcher: str,
    section: Mapping[str, Any] | None,
    flags: Mapping[str, Any],
    options: tuple[LauncherOption, ...],
) -> Any:
    """The settings from the cluster file's section, then the flags given (by field)."""
    adapter = _adapter(settings_type)
    try:
        from_file = adapter.validate_python(dict(section or {}))
    except ValidationError as exc:
        raise InputError(
            f"cluster file, section {launcher}: {_first(exc, settings_type)}"
        ) from None
    chosen = {k: v for k, v in flags.items() if v is not None and v != ()}
    if not chosen:
        return from_file
    for option in options:
        current = getattr(from_file, option.field)
        if option.multiple and option.field in chosen:
            chosen[option.field] = (*current, *chosen[option.field])
    try:
        return adapter.validate_python({**dataclasses.asdict(from_file), **chosen})
    except ValidationError as exc:
        field = exc.errors()[0]["loc"][0]
        flag = next((o.flag for o in options if o.field == field), launcher)
        raise InputError(f"{flag}: {_first(exc, settings_type, where=False)}") from None


def check_section(settings_type: type[Any], launcher: str, section: Mapping[str, Any]) -> None:
    """Raise InputError for a section of the cluster file its launcher cannot read."""
    read_settings(settings_type, launcher, section, {}, ())


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(settings_type: type[Any]) -> TypeAdapter[Any]:
    """Built once a type: building one walks its fields."""
    if settings_type not in _ADAPTERS:
        _ADAPTERS[settings_type] = TypeAdapter(settings_type)
    return _ADAPTERS[settings_type]


UNKNOWN = ("unexpected_keyword_argument", "extra_forbidden")


def _first(exc: ValidationError, settings_type: type[Any], where: bool = True) -> str:
    """The first error in one line: where, and what (an unknown setting, with the known)."""
    err = exc.errors()[0]
    message = err["msg"].removeprefix("Value error, ").replace("a valid tuple", "a list")
    if err["type"] in UNKNOWN:
        known = ", ".join(f.name for f in dataclasses.fields(settings_type))
        message = f"no such setting; settings: {known}"
    place = ".".join(str(p) for p in err["loc"])
    return f"{place}: {message}" if where and place else message
