"""Search-space files: candidate values per knob, one file per engine in search_spaces/."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autotune.errors import InputError
from autotune.space.config import KNOBS, TrainConfig, coerce_knob
from autotune.specs.loading import read_yaml_mapping

SPACES_DIR = Path(__file__).resolve().parents[1] / "search_spaces"


@dataclass(frozen=True)
class SearchSpace:
    """Candidate values for each knob the space varies; other knobs keep their defaults."""

    engine: str
    values: dict[str, tuple[Any, ...]] = field(hash=False)
    source: str = ""
    origins: dict[str, str] = field(default_factory=dict, hash=False)
    """Where a knob's values came from when not from `source` (`space.derive`)."""
    yours: dict[str, Any] = field(default_factory=dict, hash=False)
    """The file's `yours:`: the knob values the user's own command runs today, for a script
    whose config autotune cannot read (the loss-parity reference)."""

    def pinned(self, knob: str, value: Any, why: str) -> SearchSpace:
        """This space with `knob` held at `value` where it offered more, and why."""
        if self.values.get(knob, (value,)) == (value,):
            return self
        return self.offering(knob, (value,), why)

    def including(self, values: dict[str, Any], why: str) -> SearchSpace:
        """This space with each of `values` among its knob's candidates (a knob the space
        does not list held at that value where it is not the default), `why` named."""
        space, defaults = self, TrainConfig()
        for knob, value in values.items():
            held = space.values.get(knob)
            if held is None and value != getattr(defaults, knob):
                space = space.offering(knob, (value,), f"{why} (the space lists none)")
            elif held is not None and value not in held:
                was = space.origins.get(knob) or space.source
                space = space.offering(knob, (*held, value), f"{was}, and {why}'s {value}")
        return space

    def offering(self, knob: str, values: tuple[Any, ...], why: str) -> SearchSpace:
        """This space with `knob`'s candidates `values`, and why."""
        return replace(
            self, values={**self.values, knob: values}, origins={**self.origins, knob: why}
        )


def default_space_path(engine: str) -> Path:
    return SPACES_DIR / f"{engine}.yaml"


def load_space(path: Path, engine: str, engine_knobs: Collection[str]) -> SearchSpace:
    """Read and check a space file: known knobs only, each used by the engine, values typed."""
    data = read_yaml_mapping(path)
    unknown = set(data) - {"engine", "knobs", "yours"}
    if unknown:
        raise InputError(
            f"{path}: unknown top-level field(s) {', '.join(sorted(unknown))}; "
            "expected engine, knobs and yours"
        )
    if data.get("engine", engine) != engine:
        raise InputError(f"{path}: space is for engine {data['engine']!r}, not {engine!r}")
    knobs = data.get("knobs")
    if not isinstance(knobs, dict) or not knobs:
        raise InputError(f"{path}: knobs must be a mapping of knob name to a list of values")
    values: dict[str, tuple[Any, ...]] = {}
    for name, options in knobs.items():
        where = f"{path}: knobs.{name}"
        if name not in KNOBS:
            raise InputError(f"{where}: unknown knob; knobs: {', '.join(KNOBS)}")
        if name == "dp":
            raise InputError(f"{where}: dp is derived from the world size, tp, pp and cp; drop it")
        if name not in engine_knobs:
            raise InputError(f"{where}: the {engine} engine does not use this knob")
        options = options if isinstance(options, list) else [options]
        if not options:
            raise InputError(f"{where}: give at least one value")
        typed = tuple(dict.fromkeys(coerce_knob(name, v, where) for v in options))
        values[name] = typed
    yours = _yours(data.get("yours", {}), path, engine, engine_knobs)
    return SearchSpace(engine=engine, values=values, source=str(path), yours=yours)


def _yours(data: object, path: Path, engine: str, engine_knobs: Collection[str]) -> dict[str, Any]:
    """The file's `yours:` mapping, each knob known to the engine and its value typed."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: yours must be a mapping of knob name to your value")
    yours: dict[str, Any] = {}
    for name, value in data.items():
        where = f"{path}: yours.{name}"
        if name not in KNOBS or name == "dp" or name not in engine_knobs:
            raise InputError(f"{where}: not a knob the {engine} engine tunes")
        if isinstance(value, list):
            raise InputError(f"{where}: give your one value, not a list")
        yours[name] = coerce_knob(name, value, where)
    return yours
